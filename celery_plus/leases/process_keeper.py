"""The transport's lease keeper: one per process and store, with its own connection.

A :class:`~celery_plus.leases.keeper.LeaseKeeper` (renewal, lost leases, maintenance) that
renews the claims of the process's holdings in the store (``holdings.py``), and on every turn
also stores the settles other threads queued — at once when one is queued or, while Celery's
event loop stores them (``event_loop.py``), on its own turns only — kept and retried each turn
while the store fails (``settles.py``), and renews the transient bindings of the attached
connections' channels.

The keeper outlives the kombu connections that start it: a connection consuming a durable
queue attaches to it and detaches when it closes, and the keeper goes on while claims or
settles are held, so the leases of tasks still executing are renewed while Celery reconnects
after a connection error. It stops once nothing is attached and nothing is held.
"""

from __future__ import annotations

import logging
import os
import time
import weakref
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from celery_plus.leases.holdings import Holdings
from celery_plus.leases.keeper import LeaseKeeper, announce_lost, clock
from celery_plus.leases.settles import flush, report_dead_letters
from celery_plus.leases.tokens import delivery_tag
from celery_plus.runtime.helper_threads import native_lock
from celery_plus.runtime.worker_state import (
    running_tags,
    stop_stale_runs,
    worker_running,
)

if TYPE_CHECKING:
    from celery_plus.model.store import Backend, JobStore, Verdict

logger = logging.getLogger("celery_plus.keeper")


def report_lost(claims: Iterable[tuple[str, int]]) -> None:
    """Signal the claims found lost, and stop their tasks if they still run here."""
    claims = list(claims)
    announce_lost(job_id for job_id, _ in claims)
    stop_stale_runs({delivery_tag(job_id, token) for job_id, token in claims})


def running_starts() -> dict[str, float]:
    """Delivery tag -> start (a :func:`clock` time) of every task started here and not yet
    acknowledged (Celery's ``time_start`` is wall-clock time)."""
    now, wall = clock(), time.time()
    return {tag: now - max(wall - float(request.time_start), 0.0)
            for tag, request in running_tags().items()}


def log_ended(claims: Iterable[tuple[str, int]]) -> None:
    """Log the claims the store says their own run ended (not lost: nothing took them over,
    their runs go on or end by themselves)."""
    for job_id, _ in claims:
        logger.info("celery-plus: the claim of job %s ended by its own run (its ack, a retry "
                    "or a continuation), not by a recovery: it is not lost", job_id)


class Attached(Protocol):
    """What the keeper needs of a connection it keeps: the transport."""

    @property
    def store(self) -> Hashable:
        """The store's identity: one keeper per store and process."""

    @property
    def holdings(self) -> Holdings: ...

    @property
    def config(self) -> Any: ...

    @property
    def worker_id(self) -> str: ...

    @property
    def connection_errors(self) -> Any: ...

    def new_backend(self) -> Backend:
        """A backend of its own on the transport's store."""

    def renew_transient(self) -> None:
        """Renew its channels' transient bindings (throttled there)."""


class TransportKeeper(LeaseKeeper):
    """Keeps the holdings of one store in this process (see the module doc)."""

    def __init__(self, store: Hashable, holdings: Holdings, config: Any,
                 new_backend: Callable[[], Backend], worker_id: str,
                 connection_errors: tuple[type[BaseException], ...] = ()) -> None:
        super().__init__("celery-plus-lease-keeper", config, worker_id)
        self.key = store
        self.holdings = holdings
        self.connection_errors = connection_errors
        self._new_backend = new_backend
        self._backend: Backend | None = None
        #: Connections attached (consuming), and their transports (for their channels'
        #: transient bindings); both guarded by the module's ``_lock``.
        self.users = 0
        self.transports: weakref.WeakSet[Attached] = weakref.WeakSet()

    def run(self) -> None:
        self.holdings.on_settle(self._settle_queued)
        super().run()

    def closing(self) -> None:
        self.holdings.off_settle(self._settle_queued)
        backend, self._backend = self._backend, None
        if backend is not None:
            try:
                backend.close()
            except Exception as exc:
                logger.debug("%s: closing its store: %r", self.label, exc)

    def store(self) -> Backend:
        if self._backend is None:
            self._backend = self._new_backend()
        return self._backend

    def held(self) -> Sequence[tuple[str, int]]:
        return self.holdings.renewable()

    def start_marks(self, held: Sequence[tuple[str, int]]) -> Sequence[int | None] | None:
        """In a Celery worker, every claim's: started (``Request.on_accepted``, or a run
        Celery reports) or not yet (reserved); elsewhere the starts known only."""
        in_worker = worker_running()
        return self.holdings.start_marks(held, clock(), running_starts() if in_worker else {},
                                         in_worker)

    def renewed(self, held: Sequence[tuple[str, int]], verdicts: Sequence[Verdict],
                asked_at: float) -> None:
        ends = self.holdings.confirmed(held, verdicts, asked_at)
        log_ended(ends.ended)
        report_lost(ends.lost)

    def report_dead_letters(self, dead: list[tuple[str, str]]) -> None:
        report_dead_letters(dead)

    def each_turn(self, backend: JobStore) -> None:
        # Each on its own: a store refusing settles must not stop the transient renewals.
        self._step(flush, backend, self.holdings, self.connection_errors)
        self._step(self._renew_transient)
        self._step(self.holdings.collect_kept)  # dropped deliveries released
        self._step(self.beat_worker, backend)

    def records_worker(self) -> bool:
        return self.users > 0

    def maintains(self) -> bool:
        return self.users > 0

    def finished(self) -> bool:
        """Leave once nothing is attached and nothing is held (under the registry lock, so
        a connection attaching now gets a new keeper)."""
        with _lock:
            if self.users or len(self.holdings):
                return False
            if _keepers.get(self.key) is self:
                del _keepers[self.key]
            return True

    def _settle_queued(self) -> None:
        """Store a queued settle at once, unless an event loop does (then on the next turn,
        within ``TICK_S``, should the loop not have)."""
        if not self.holdings.loop_stores_settles():
            self.wake()

    def _renew_transient(self) -> None:
        """Renew the transient bindings of the attached connections' channels (throttled
        there): a task may be blocking the drain loop that renews them otherwise."""
        with _lock:
            transports = list(self.transports)
        for transport in transports:
            transport.renew_transient()


_lock = native_lock()
_keepers: dict[Hashable, TransportKeeper] = {}


def attach(transport: Attached) -> TransportKeeper:
    """The running keeper of ``transport``'s store in this process, one user more."""
    with _lock:
        keeper = _keepers.get(transport.store)
        if keeper is None or not keeper.is_alive():
            keeper = TransportKeeper(transport.store, transport.holdings, transport.config,
                                     transport.new_backend, transport.worker_id,
                                     tuple(transport.connection_errors))
            _keepers[transport.store] = keeper
            keeper.start()
        keeper.users += 1
        keeper.transports.add(transport)
        return keeper


def detach(keeper: TransportKeeper, transport: Attached) -> None:
    """One user less; the keeper stops by itself once nothing is held either."""
    with _lock:
        keeper.users = max(keeper.users - 1, 0)
        keeper.transports.discard(transport)


def _after_fork_in_child() -> None:
    global _lock
    _lock = native_lock()
    _keepers.clear()  # their threads exist only in the parent


os.register_at_fork(after_in_child=_after_fork_in_child)
