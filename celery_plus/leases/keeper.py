"""The lease keeper: a helper thread that keeps a process's claims in one store alive.

Every ``plus_heartbeat_interval`` it renews the leases of the claims the process holds (sooner
again after a failed attempt, at once after a stall) and reports the ones the store says are
lost (the store answers a verdict per claim: renewed, ended by its own run, or lost); every
``plus_maintenance_interval`` it runs the store's throttled maintenance and recovers expired
leases, except just after a failed store call. Each step runs on its own: a
step that fails is logged and leaves the others to run.

One keeper serves both the durable transport (``leases/process_keeper.py``: it also stores the
settles and renews transient bindings) and the coordination store (``coordination/keeper.py``:
it also retries the settles a store error kept back). A subclass supplies only what differs:
the store (:meth:`LeaseKeeper.store`), what to renew (:meth:`~LeaseKeeper.held`), what to do
with the answer (:meth:`~LeaseKeeper.renewed`), and optionally work of its own each turn.

It is a :class:`~celery_plus.runtime.helper_threads.HelperThread` (a real OS thread, signals
blocked)
and holds no process-wide state: whoever starts keepers resets its own registry after a fork.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, cast

from celery_plus import signals
from celery_plus.model import formats
from celery_plus.model.admin import UnsupportedStore
from celery_plus.model.store import WorkerBeat
from celery_plus.runtime.helper_threads import HelperThread, NativeEvent
from celery_plus.runtime.worker_state import worker_node
from celery_plus.stores.admin_base.queue_history import HistoryStore, record_sample
from celery_plus.stores.registry import admin_for

if TYPE_CHECKING:
    from celery_plus.model.store import Backend, JobStore, Verdict

logger = logging.getLogger("celery_plus.keeper")

#: Longest wait between two turns (:meth:`LeaseKeeper.wake` starts one at once).
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


def clock() -> float:
    """Seconds on a host-wide clock that keeps counting while a process is stopped (the
    same in every process of the host, so a pool process can compare a parent's stamp)."""
    return time.clock_gettime(CLOCK)


CLOCK = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)


def announce_lost(job_ids: Iterable[str]) -> None:
    """Log and signal (``task_lease_lost``) each job whose lease was found lost."""
    for job_id in job_ids:
        logger.warning("celery-plus: lease of job %s was lost (taken over)", job_id)
        signals.task_lease_lost.send(sender=None, task_id=job_id)


class LeaseKeeper(HelperThread):
    """Renews and maintains for one store in this process (see the module doc).

    Subclasses implement :meth:`store`, :meth:`held`, :meth:`renewed` and
    :meth:`report_dead_letters`, and may extend :meth:`each_turn`, :meth:`heartbeat`,
    :meth:`maintains`, :meth:`finished` and :meth:`closing`.
    """

    #: How the keeper names itself in log lines.
    label = "celery-plus lease keeper"
    #: True: the first heartbeat comes at once (a keeper started again while claims are
    #: still held must renew them before they lapse); False: one interval after the start.
    first_heartbeat_now = False

    def __init__(self, name: str, config: Any, worker_id: str) -> None:
        super().__init__(name=name, daemon=True)
        self.config = config
        self.worker_id = worker_id
        self._stopping = NativeEvent()
        #: Set to start a turn now (stopping, or work queued).
        self._wake = NativeEvent()
        #: time.monotonic() of the last failed store call (-inf: none yet).
        self._failed_at = float("-inf")
        #: time.monotonic() of the next worker record beat (:meth:`beat_worker`).
        self._next_beat = 0.0
        #: The store the queue history is sampled in, and its admin (None: it has none).
        self._history: tuple[JobStore, HistoryStore | None] | None = None

    # -- what differs --------------------------------------------------------------------
    def store(self) -> JobStore:
        """The store to renew in (opened on first use if need be)."""
        raise NotImplementedError

    def held(self) -> Sequence[tuple[str, int]]:
        """(job id, token) of every claim to renew now."""
        raise NotImplementedError

    def renewed(self, held: Sequence[tuple[str, int]], verdicts: Sequence[Verdict],
                asked_at: float) -> None:
        """Apply a heartbeat's answer, one verdict per claim of ``held``: the ``renewed``
        ones were renewed at ``asked_at`` (a :func:`clock` time); the others are no longer
        this process's to renew — ``ended`` by their own run (not lost: never announced nor
        stopped) or ``lost``."""
        raise NotImplementedError

    def report_dead_letters(self, dead: list[tuple[str, str]]) -> None:
        """Report jobs (id, reason) the store dead-lettered."""
        raise NotImplementedError

    def start_marks(self, held: Sequence[tuple[str, int]]) -> Sequence[int | None] | None:
        """The start mark of each claim of ``held`` for the heartbeat
        (``JobStore.heartbeat``); None: none known."""
        return None

    def each_turn(self, backend: JobStore) -> None:
        """Work of the subclass's own on every turn (before any heartbeat)."""

    def maintains(self) -> bool:
        """Whether to run the store's maintenance on this turn, when it is due."""
        return True

    def finished(self) -> bool:
        """Whether to stop by itself (checked each turn)."""
        return False

    def records_worker(self) -> bool:
        """Whether this keeper writes the worker's record (:meth:`beat_worker`) now."""
        return True

    def beat_worker(self, backend: JobStore) -> None:
        """In a Celery worker, its record in the store every heartbeat interval (its node
        name, host, pid, queues: the admin's workers page and health; the stored formats
        it reads: publishers, ``stores/readers.py``; ``WorkerRecords``)."""
        node = worker_node()
        now = time.monotonic()
        if node is None or not self.records_worker() or now < self._next_beat:
            return
        interval = self.config.heartbeat_interval
        self._next_beat = now + interval
        record = getattr(backend, "worker_beat", None)
        if record is not None:
            record(WorkerBeat(node=node[0], host=socket.gethostname(), pid=os.getpid(),
                              queues=node[1], interval_ms=round(interval * 1000),
                              reads=formats.READS))

    def closing(self) -> None:
        """Called once in the keeper's thread as it ends."""

    # -- the loop ------------------------------------------------------------------------
    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()

    def wake(self) -> None:
        """Start a turn now instead of within ``TICK_S``."""
        self._wake.set()

    def run(self) -> None:
        try:
            self._loop()
        finally:
            self.closing()

    def _loop(self) -> None:
        interval = self.config.heartbeat_interval
        next_heartbeat = time.monotonic() + (0.0 if self.first_heartbeat_now else interval)
        next_maintenance = time.monotonic()
        turn = time.monotonic()
        while True:
            self._wake.wait(TICK_S)
            self._wake.clear()
            if self._stopping.is_set() or self.finished():
                return
            if time.monotonic() - turn > STALL_S:
                next_heartbeat = 0.0  # frozen or stalled: renew now
            turn = time.monotonic()
            try:
                backend = self.store()
            except Exception as exc:
                self._failed_at = time.monotonic()
                logger.warning("%s: cannot open the store: %r", self.label, exc)
                continue
            now = time.monotonic()
            # Each step on its own: a store refusing settles must not stop the heartbeats.
            self._step(self.each_turn, backend)
            if now >= next_heartbeat:
                ok = self._step(self.heartbeat, backend)
                next_heartbeat = now + (interval if ok else min(interval, HEARTBEAT_RETRY_S))
                if time.monotonic() - now > STALL_S:
                    next_heartbeat = 0.0  # its answer may be stale: ask again
            if now >= next_maintenance and self.maintains():
                next_maintenance = now + self.config.maintenance_interval
                self._step(self.maintain, backend)

    def sample_queues(self, backend: JobStore) -> None:
        """On the turn that ran the store's maintenance (one worker per interval,
        cluster-wide): the queue history's sample of this minute, unless the store has it
        (stores/admin_base/queue_history.py)."""
        if self._history is None or self._history[0] is not backend:
            admin: HistoryStore | None = None
            with contextlib.suppress(UnsupportedStore):  # not served by the admin: no history
                admin = cast("HistoryStore", admin_for(cast("Backend", backend)))
            self._history = (backend, admin)
        if self._history[1] is not None:
            record_sample(self._history[1])

    def _step(self, step: Callable[..., object], *args: Any) -> bool:
        try:
            step(*args)
        except Exception as exc:
            self._failed_at = time.monotonic()
            # The type and the text: some clients' reprs drop the store's reply.
            logger.warning("%s: %s: %s: %s", self.label, step.__name__.strip("_"),
                           type(exc).__name__, exc)
            return False
        return True

    def heartbeat(self, backend: JobStore) -> None:
        """Renew every held claim; hand the answer to :meth:`renewed`."""
        held = self.held()
        if not held:
            return
        asked_at = clock()
        starts = self.start_marks(held)
        verdicts = (backend.heartbeat(list(held)) if starts is None
                    else backend.heartbeat(list(held), starts))
        self.renewed(held, verdicts, asked_at)

    def maintain(self, backend: JobStore) -> None:
        """The store's throttled maintenance, then the queue history's sample and recovery
        of expired leases (held off for a while after a failed store call: live workers renew
        their claims first)."""
        if not backend.maintain(self.worker_id):
            return
        self._step(self.sample_queues, backend)
        hold_off = max(RECOVERY_HOLD_OFF_S, self.config.heartbeat_interval)
        if time.monotonic() - self._failed_at < hold_off:
            return
        for item in backend.recover():
            logger.warning("celery-plus: recovered job %s (%s)", item.job_id, item.outcome)
            signals.task_recovered.send(sender=None, task_id=item.job_id, outcome=item.outcome)
            if item.outcome == "dead":
                self.report_dead_letters([(item.job_id, "delivery limit")])


__all__ = ["CLOCK", "HEARTBEAT_RETRY_S", "RECOVERY_HOLD_OFF_S", "STALL_S", "TICK_S",
           "LeaseKeeper", "announce_lost", "clock"]
