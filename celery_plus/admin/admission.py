"""Which open connection makes room for a new one (the dashboard's server, :mod:`.server`).

Refusing the newcomer when the server is full lets whoever holds the connections keep
everyone else out, an operator on the same address included (``ssh -L`` arrives from
127.0.0.1, like any local process). So a newcomer is always taken, and one connection that is
worth the least is closed instead:

* when the newcomer's address holds more than its share, one of that address; when the
  server holds more than its total, one of the address that holds the most;
* of those, the one of the lowest standing — a connection that never sent a whole request,
  then one whose requests were anonymous, then a reader's, then an operator's — an idle one
  before one being answered at equal standing, and the stalest (the longest since its last
  whole request, or since it opened) of those.

A connection being answered is closed too when it is the one worth the least: connections
that always have a request pipelined are never idle, and sparing them let such a flood
refuse everyone else (the operator's 0 of 31 pages). The server closes it once the answer
it is making is written (:mod:`.server`).

A flood of silent, dripping or busy sockets therefore evicts its own oldest sockets; the
operator's new connection sends its request at once and is answered before its turn to be
evicted comes, and a connection that carried the operator's credentials is evicted last.
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
        """It is to be closed (by the next turn of the server's loop, or once the answer it
        is making is written)."""

    def recheck(self) -> bool:
        """Look again at what an :data:`UNPROVEN` connection has sent (its request may have
        arrived since it was taken); whether its standing rose."""


class Ledger:
    """How many connections each address holds, those being closed left out (kept as they
    open and close, so that a newcomer that fits is let in without looking at the others)."""

    def __init__(self) -> None:
        self.by_host: Counter[str] = Counter()
        self.total = 0
        self._counted: set[int] = set()

    def add(self, conn: Connection) -> None:
        self._counted.add(id(conn))
        self.by_host[conn.host] += 1
        self.total += 1

    def drop(self, conn: Connection) -> None:
        """``conn`` is being closed (again: nothing)."""
        if id(conn) in self._counted:
            self._counted.discard(id(conn))
            self.by_host[conn.host] -= 1
            if not self.by_host[conn.host]:
                del self.by_host[conn.host]
            self.total -= 1


def make_room(connections: Iterable[Connection], newcomer: Connection, ledger: Ledger,
              total: int, per_address: int, exempt: str | None = None, slack: int = 0
              ) -> tuple[bool, list[Connection]]:
    """Whether ``newcomer`` (counted in ``ledger``) may stay, and the connections to close for
    it: when its address or the server is over its bound, enough of the group over it to be
    ``slack`` under it (so the next newcomers fit without a look at every connection). None
    to close, and it may not stay, when that group has no other connection still open."""
    host = newcomer.host
    group: str | None
    if host != exempt and ledger.by_host[host] > per_address:
        group, excess = host, ledger.by_host[host] - per_address
    elif ledger.total > total:
        group = max((h for h in ledger.by_host if h != exempt),
                    key=ledger.by_host.__getitem__, default=None)
        excess = ledger.total - total
    else:
        return True, []
    candidates = [c for c in connections if c is not newcomer and not c.closing
                  and (group is None or c.host == group)]
    if not candidates:
        return False, []
    for _ in range(3):  # (a victim whose request arrived meanwhile is looked at again)
        candidates.sort(key=lambda c: (c.standing, c.busy, c.since))
        victims = candidates[:excess + slack]
        if not any([c.recheck() for c in victims if c.standing == UNPROVEN]):
            break
    return True, victims


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
