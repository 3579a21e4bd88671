"""The lease keeper: one background thread per process and store, with its own connection.

It renews the lease of every claim the process holds in the store (``holdings.py``) every
``plus_heartbeat_interval`` (sooner again after a failed attempt), stores the settles other
threads queued as soon as they are queued — or, while Celery's event loop stores them
(``event_loop.py``), on its own turns only — kept and retried each turn while the store fails,
and runs the cluster's throttled maintenance (recovery of expired leases, promotion of due
jobs, unblocking, pruning).

The keeper outlives the kombu connections that start it: a connection consuming a durable
queue attaches to it and detaches when it closes, and the keeper goes on while claims or
settles are held, so the leases of tasks still executing are renewed while Celery reconnects
after a connection error. It stops once nothing is attached and nothing is held.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
import weakref
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from .. import signals
from ..helper_threads import HelperThread, NativeEvent, native_lock
from .backend import Settle
from .holdings import Holdings, clock, tag_of
from .worker_state import stop_stale_runs

if TYPE_CHECKING:
    from . import Transport
    from .backend import JobStore

logger = logging.getLogger("celery_plus.keeper")

#: Longest wait between two turns; a queued settle starts a turn at once.
TICK_S = 0.1
#: Longest wait before a failed heartbeat is tried again.
HEARTBEAT_RETRY_S = 1.0
#: A loop turn (or a heartbeat) that took longer than this means the process was frozen
#: (SIGSTOP, a VM pause) or the store stalled: the answers in hand may be stale, so the
#: keeper renews (and learns which leases were lost) at once.
STALL_S = 1.0
#: After a failed store call, this keeper recovers no expired lease for this long (or a
#: heartbeat interval, if longer): when a store comes back from an outage, every live
#: worker's keeper renews its claims within ``HEARTBEAT_RETRY_S``, before any of them
#: recovers a lease that lapsed while nobody could renew it.
RECOVERY_HOLD_OFF_S = 3.0


def report_dead_letters(dead: Iterable[tuple[str, str]]) -> None:
    for job_id, reason in dead:
        logger.error("celery-plus: job %s dead-lettered (%s)", job_id, reason)
        signals.task_dead_lettered.send(sender=None, task_id=job_id, reason=reason)


def report_lost(claims: Iterable[tuple[str, int]]) -> None:
    """Signal the claims found lost, and stop their tasks if they still run here."""
    claims = list(claims)
    for job_id, _ in claims:
        logger.warning("celery-plus: lease of job %s was lost (taken over)", job_id)
        signals.task_lease_lost.send(sender=None, task_id=job_id)
    stop_stale_runs({tag_of(job_id, token) for job_id, token in claims})


def flush(backend: JobStore, holdings: Holdings,
          connection_errors: tuple[type[BaseException], ...] = ()) -> None:
    """Store the pending settles of ``holdings``; whatever does not land is kept for the
    next try (a settle batch is never dropped).

    A connection error keeps the whole batch. A store that refuses the batch (an error of
    the store call itself) gets each settle alone, so one bad settle holds back no other;
    one it refuses alone is tried once more with its failure details reduced to plain ASCII
    text, and kept (and logged) if even that fails.
    """
    settles = holdings.take_settles()
    if not settles:
        return
    try:
        dead = backend.settle(settles)
    except connection_errors:
        holdings.failed(settles)
        raise
    except Exception as exc:
        logger.warning("celery-plus: the store refused a batch of %d settles (%r); storing "
                       "them one by one", len(settles), exc)
        dead = _settle_one_by_one(backend, holdings, settles, connection_errors)
    else:
        holdings.landed(settles)
    report_dead_letters(dead)


def _settle_one_by_one(backend: JobStore, holdings: Holdings, settles: Sequence[Settle],
                       connection_errors: tuple[type[BaseException], ...]
                       ) -> list[tuple[str, str]]:
    dead: list[tuple[str, str]] = []
    refused: list[Settle] = []
    for index, settle in enumerate(settles):
        for attempt in (settle, plain_settle(settle)):
            try:
                dead += backend.settle([attempt])
            except connection_errors:
                holdings.failed([*refused, *settles[index:]])
                raise
            except Exception as exc:
                if attempt is not settle:
                    logger.error("celery-plus: the store refused the settle of job %s "
                                 "(%r); kept for the next try", settle.job_id, exc)
                    refused.append(settle)
                continue
            holdings.landed([settle])
            break
    holdings.failed(refused)
    return dead


def plain_settle(settle: Settle) -> Settle:
    """``settle`` with its failure details as printable ASCII (no NUL, no lone surrogate)."""
    if not settle.detail:
        return settle
    detail = {str(key): _plain(value) for key, value in settle.detail.items()}
    return dataclasses.replace(settle, detail=detail)


def _plain(value: Any) -> Any:
    if isinstance(value, (bool, int, float)) or value is None:
        return value
    text = value if isinstance(value, str) else repr(value)
    return text.replace("\x00", "\\x00").encode("ascii", "backslashreplace").decode("ascii")


def heartbeat(backend: JobStore, holdings: Holdings) -> None:
    """Renew every held claim; mark (and report) the ones the store says are lost."""
    pairs = holdings.renewable()
    if not pairs:
        return
    asked_at = clock()
    lost = backend.heartbeat(pairs)
    report_lost(holdings.confirmed(pairs, lost, asked_at))


class LeaseKeeper(HelperThread):
    """Renews, flushes and maintains for one store in this process (see the module doc)."""

    def __init__(self, store: Hashable, holdings: Holdings, config: Any,
                 new_backend: Callable[[], JobStore], worker_id: str,
                 connection_errors: tuple[type[BaseException], ...] = ()) -> None:
        super().__init__(name="celery-plus-lease-keeper", daemon=True)
        self.store = store
        self.holdings = holdings
        self.config = config
        self.worker_id = worker_id
        self.connection_errors = connection_errors
        self._new_backend = new_backend
        self._backend: JobStore | None = None
        #: Connections attached (consuming), and their transports (for their channels'
        #: transient bindings); both guarded by the module's ``_lock``.
        self.users = 0
        self.transports: weakref.WeakSet[Transport] = weakref.WeakSet()
        self._stopping = NativeEvent()
        #: Set to start a turn now: stopping, or a settle queued (``Holdings.on_settle``).
        self._wake = NativeEvent()
        #: time.monotonic() of the last failed store call (-inf: none yet).
        self._failed_at = float("-inf")

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()

    def run(self) -> None:
        self.holdings.on_settle(self._settle_queued)
        try:
            self._loop()
        finally:
            self.holdings.off_settle(self._settle_queued)
            backend, self._backend = self._backend, None
            if backend is not None:
                try:
                    backend.close()
                except Exception as exc:
                    logger.debug("celery-plus lease keeper: closing its store: %r", exc)

    def _loop(self) -> None:
        interval = self.config.heartbeat_interval
        next_heartbeat = time.monotonic() + interval
        next_maintenance = time.monotonic()
        turn = time.monotonic()
        while True:
            self._wake.wait(TICK_S)
            self._wake.clear()
            if self._stopping.is_set() or self._done():
                return
            if time.monotonic() - turn > STALL_S:
                next_heartbeat = 0.0  # frozen or stalled: renew now
            turn = time.monotonic()
            try:
                backend = self._store()
            except Exception as exc:
                self._failed_at = time.monotonic()
                logger.warning("celery-plus lease keeper: cannot open the store: %r", exc)
                continue
            now = time.monotonic()
            # Each step on its own: a store refusing settles must not stop the heartbeats.
            self._step(flush, backend, self.holdings, self.connection_errors)
            self._step(self._renew_transient)
            if now >= next_heartbeat:
                ok = self._step(heartbeat, backend, self.holdings)
                next_heartbeat = now + (interval if ok else min(interval, HEARTBEAT_RETRY_S))
                if time.monotonic() - now > STALL_S:
                    next_heartbeat = 0.0  # its answer may be stale: ask again
            if now >= next_maintenance and self.users:
                next_maintenance = now + self.config.maintenance_interval
                self._step(self._maintain, backend)

    def _settle_queued(self) -> None:
        """Store a queued settle at once, unless an event loop does (then on the next turn,
        within ``TICK_S``, should the loop not have)."""
        if not self.holdings.loop_stores_settles():
            self._wake.set()

    def _step(self, step: Callable[..., None], *args: Any) -> bool:
        try:
            step(*args)
        except Exception as exc:
            self._failed_at = time.monotonic()
            logger.warning("celery-plus lease keeper: %s: %r", step.__name__.strip("_"), exc)
            return False
        return True

    def _done(self) -> bool:
        """Leave once nothing is attached and nothing is held (under the registry lock, so
        a connection attaching now gets a new keeper)."""
        with _lock:
            if self.users or len(self.holdings):
                return False
            if _keepers.get(self.store) is self:
                del _keepers[self.store]
            return True

    def _renew_transient(self) -> None:
        """Renew the transient bindings of the attached connections' channels (throttled
        there): a task may be blocking the drain loop that renews them otherwise."""
        with _lock:
            transports = list(self.transports)
        for transport in transports:
            for channel in transport._live_channels():
                channel.renew_transient()

    def _store(self) -> JobStore:
        if self._backend is None:
            self._backend = self._new_backend()
        return self._backend

    def _maintain(self, backend: JobStore) -> None:
        if not backend.maintain(self.worker_id):
            return
        hold_off = max(RECOVERY_HOLD_OFF_S, self.config.heartbeat_interval)
        if time.monotonic() - self._failed_at < hold_off:
            return  # the store was away: live workers renew their claims first
        for item in backend.recover():
            logger.warning("celery-plus: recovered job %s (%s)", item.job_id, item.outcome)
            signals.task_recovered.send(sender=None, task_id=item.job_id, outcome=item.outcome)
            if item.outcome == "dead":
                report_dead_letters([(item.job_id, "delivery limit")])


_lock = native_lock()
_keepers: dict[Hashable, LeaseKeeper] = {}


def attach(transport: Transport) -> LeaseKeeper:
    """The running keeper of ``transport``'s store in this process, one user more."""
    with _lock:
        keeper = _keepers.get(transport.store)
        if keeper is None or not keeper.is_alive():
            keeper = LeaseKeeper(transport.store, transport.holdings, transport.config,
                                 transport.new_backend, transport.worker_id,
                                 tuple(transport.connection_errors))
            _keepers[transport.store] = keeper
            keeper.start()
        keeper.users += 1
        keeper.transports.add(transport)
        return keeper


def detach(keeper: LeaseKeeper, transport: Transport) -> None:
    """One user less; the keeper stops by itself once nothing is held either."""
    with _lock:
        keeper.users = max(keeper.users - 1, 0)
        keeper.transports.discard(transport)


def _after_fork_in_child() -> None:
    global _lock
    _lock = native_lock()
    _keepers.clear()  # their threads exist only in the parent


os.register_at_fork(after_in_child=_after_fork_in_child)
