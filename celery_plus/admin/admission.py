"""Which open connection makes room for a new one (the dashboard's server, :mod:`.server`).

Refusing the newcomer when the server is full lets whoever holds the connections keep
everyone else out, an operator on the same address included (``ssh -L`` arrives from
127.0.0.1, like any local process). So a newcomer is always taken, and one connection that is
worth the least is closed instead:

* never one that is being answered (its request is queued or running);
* when the newcomer's address holds more than its share, one of that address; when the
  server holds more than its total, one of the address that holds the most;
* of those, the one of the lowest standing — a connection that never sent a whole request,
  then one whose requests were anonymous, then a reader's, then an operator's — and the
  stalest at equal standing (the longest since its last whole request, or since it opened).

A flood of silent or dripping sockets therefore evicts its own oldest sockets; the operator's
new connection sends its request at once and is answered before its turn to be evicted
comes, and a connection that carried the operator's credentials is evicted last.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any, Protocol

#: A connection's standing: nothing whole received yet, then the best role it presented.
UNPROVEN, ANONYMOUS_RANK, READER_RANK, OPERATOR_RANK = 0, 1, 2, 3


class Connection(Protocol):
    """What admission reads of a connection (waitress's channel, :mod:`.server`)."""

    #: The client address it comes from.
    host: str
    #: :data:`UNPROVEN` until a whole request arrived, then the best role presented.
    standing: int
    #: When it opened or last received a whole request (``time.monotonic()``).
    since: float

    @property
    def busy(self) -> bool:
        """A request of it is queued or being answered."""

    @property
    def closing(self) -> bool:
        """It is to be closed (by the next turn of the server's loop)."""


def make_room(connections: Iterable[Connection], newcomer: Connection, total: int,
              per_address: int, exempt: str | None = None
              ) -> tuple[bool, Connection | None]:
    """Whether ``newcomer`` (among ``connections``) may stay, and the connection to close
    for it (None: it fits as it is, or nothing may be closed and it may not stay)."""
    open_now = [c for c in connections if c is not newcomer and not c.closing]
    by_host = Counter(c.host for c in open_now)
    if newcomer.host != exempt and by_host[newcomer.host] >= per_address:
        pool = [c for c in open_now if c.host == newcomer.host]
    elif len(open_now) >= total:
        heaviest = max((h for h in by_host if h != exempt), key=by_host.__getitem__,
                       default=None)
        pool = [c for c in open_now if c.host == heaviest] or open_now
    else:
        return True, None
    candidates = [c for c in pool if not c.busy]
    if not candidates:
        return False, None
    return True, min(candidates, key=lambda c: (c.standing, c.since))


def standing_of(head: bytes, rank: Callable[[str | None], int]) -> int:
    """The standing a connection's first bytes give it: :data:`UNPROVEN` until its request's
    head is whole, then ``rank`` of its ``Authorization`` header (None: it has none)."""
    end = head.find(b"\r\n\r\n")
    if end < 0:
        return UNPROVEN
    for line in head[:end].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"authorization":
            return rank(value.strip().decode("latin-1"))
    return rank(None)


def address_of(addr: Any) -> str:
    """The host of a socket address (a tuple for TCP, a path for a Unix socket)."""
    return str(addr[0] if isinstance(addr, tuple) else addr)
