"""Transient queues: which queues are not durable, and how long their bindings live.

A queue is transient when its name says so (remote control ``*.pidbox``, events
``celeryev*``) or when a process declared it not durable, auto-delete or exclusive (Celery's
``rpc://`` reply queue, a ``Broadcast`` queue, a user's non-durable queue). A transient queue
behaves as a list does in kombu's Redis transport: its messages are never jobs, have no task
identity, no lease and no retry; they expire from the store 300 s after the queue's last push.

The declaring process knows a queue is transient; others learn it from the store's *mark*
(``Backend.mark_transient``), which the declaring side writes when it declares the queue and
its consumer refreshes — so a worker publishing an ``rpc://`` result to a reply queue it never
declared pushes a transient message, not a job under the task's id.

Bindings of transient queues *lapse*: each is bound with a lifetime (twice the queue's
``x-expires``, at least :data:`MIN_TTL_MS`; :data:`DEFAULT_TTL_MS` without one) that the
queue's consumer renews while it lives (the channel's drain loop, and a worker's lease keeper
while a task blocks that loop). A process that dies without unbinding — a ``kill -9``ed worker,
an event receiver that crashed — stops receiving broadcasts once its bindings lapse, as a
Redis pub/sub subscriber stops when its connection goes. Bindings of durable queues are
permanent, as in kombu.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from celery_plus.model.store import RoutingStore

#: Shortest lifetime of a transient binding or mark: long enough to ride out a stalled loop.
MIN_TTL_MS = 10_000
#: Lifetime of a transient binding or mark whose queue has no ``x-expires``.
DEFAULT_TTL_MS = 60_000


def named_transient(queue: str) -> bool:
    """Remote-control and event queues are transient whatever their declaration says."""
    return queue.endswith(".pidbox") or queue.startswith("celeryev")


def declared_transient(durable: bool = True, auto_delete: bool = False,
                       exclusive: bool = False) -> bool:
    """A declaration AMQP would not keep across a broker restart or a consumer's exit."""
    return not durable or bool(auto_delete) or bool(exclusive)


def lifetime_ms(arguments: dict[str, Any] | None) -> int:
    """How long a transient queue's binding or mark lives without a refresh."""
    try:
        expires = int((arguments or {})["x-expires"])
    except (KeyError, TypeError, ValueError):
        return DEFAULT_TTL_MS
    return max(2 * expires, MIN_TTL_MS)


@dataclass(frozen=True)
class Declared:
    """What one declaration of a queue said."""

    transient: bool
    auto_delete: bool
    ttl_ms: int


class TransientQueues:
    """One connection's knowledge of which queues are transient.

    Declarations made on this connection are authoritative; a queue this connection never
    declared is looked up once in the store (its mark) and the answer kept: a reply queue is
    marked before any message is addressed to it, and a task queue never is.
    """

    def __init__(self, store: Callable[[], RoutingStore]) -> None:
        #: The store as the calling thread must use it (the transport's ``backend``).
        self._store = store
        self._declared: dict[str, Declared] = {}
        self._looked_up: dict[str, bool] = {}
        #: When each queue was last marked here (monotonic s): re-declaring a queue, as
        #: Celery's rpc:// backend does for every task sent, marks it again only when due.
        self._marked_at: dict[str, float] = {}
        self._lock = threading.Lock()

    def declare(self, queue: str, durable: bool = True, auto_delete: bool = False,
                exclusive: bool = False, arguments: dict[str, Any] | None = None,
                **_: Any) -> Declared:
        """Record a declaration; a transient one is marked in the store (unless its name
        already says it is transient)."""
        transient = named_transient(queue) or declared_transient(durable, auto_delete,
                                                                 exclusive)
        declared = Declared(transient, bool(auto_delete), lifetime_ms(arguments))
        with self._lock:
            self._declared[queue] = declared
            self._looked_up.pop(queue, None)
        if transient and not named_transient(queue):
            self.mark(queue, declared.ttl_ms)
        return declared

    def mark(self, queue: str, ttl_ms: int) -> None:
        """Mark ``queue`` transient in the store, unless this connection did less than a
        third of its lifetime ago."""
        now = time.monotonic()
        if now - self._marked_at.get(queue, -1e9) < ttl_ms / 3000:
            return
        self._store().mark_transient(queue, ttl_ms)
        self._marked_at[queue] = now

    def is_transient(self, queue: str) -> bool:
        if named_transient(queue):
            return True
        declared = self._declared.get(queue)
        if declared is not None:
            return declared.transient
        known = self._looked_up.get(queue)
        if known is None:
            known = self._store().is_marked_transient(queue)
            with self._lock:
                self._looked_up[queue] = known
        return known

    def marked(self, queue: str) -> bool:
        """True for a queue transient by declaration only (its mark must be kept alive)."""
        declared = self._declared.get(queue)
        return declared is not None and declared.transient and not named_transient(queue)

    def binding_ttl_ms(self, queue: str) -> int:
        """Lifetime of a binding of ``queue`` (0: permanent, for durable queues)."""
        if not self.is_transient(queue):
            return 0
        declared = self._declared.get(queue)
        return declared.ttl_ms if declared is not None else DEFAULT_TTL_MS

    def auto_delete(self, queue: str) -> bool:
        declared = self._declared.get(queue)
        return declared is not None and declared.auto_delete

    def forget(self, queue: str) -> None:
        """Drop a deleted queue's declaration (its store mark lapses by itself, so a late
        reply to it is still a transient message, not a job)."""
        with self._lock:
            self._declared.pop(queue, None)
