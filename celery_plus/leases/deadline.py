"""A run never outlives its lease: the lease watch of a worker's main process.

The store takes a claim back once its lease deadline passes: the lease keeper's last renewal
the store applied, plus ``plus_visibility_timeout``. The worker counts each claim's lease from
the moment it *sent* the renewal the store confirmed (``Holdings`` records the time before the
call), so the store's deadline is never earlier than the worker's own reckoning. A claim is
certainly ours for ``SURE_SHARE`` of the lease after that; past it, its run is stopped, before
the store's deadline, whether the store said anything or not (a partition, a stalled link, a
store refusing writes, a keeper starved):

* a prefork pool process is killed (``worker_state.stop_overdue_runs``): its job goes back;
* the solo, threads and green pools cannot stop one task: the worker exits (code 75, one
  CRITICAL line; its supervisor restarts it), and its claims lapse and are recovered;
* either way, the processes the runs started die first (``runtime/process_tree.py``).

The margin between the two — ``(1 - SURE_SHARE)`` of the lease, 6 s of the default 30 s — covers
the stop itself and the clocks: the stop comes before the store's deadline as long as the
worker's clock runs less than 25% slower than the store's over a lease, less the stop's own
latency (20% is the bound docs/reliability.md states).

The watch is a helper thread ticking every ``TICK_S``, which does no store call of its own (a
stalled link cannot hold it). A task holding the GIL starves it, as it starves the keeper: for
the pools that run tasks in the worker's own process it also keeps the deadline of the runs
going on in a :class:`~celery_plus.runtime.deadline_guard.GuardSlot`, which a separate guard
process enforces (``runtime/deadline_guard.py``), and each task lowers it itself as it starts
(:func:`run_starts`), before its code can hold the GIL.
"""

from __future__ import annotations

import logging
import os

from celery_plus.leases import holdings
from celery_plus.leases.keeper import STALL_S, clock
from celery_plus.runtime import deadline_guard
from celery_plus.runtime.helper_threads import HelperThread, NativeEvent, native_lock
from celery_plus.runtime.worker_state import running_tags, stop_overdue_runs

logger = logging.getLogger("celery_plus.keeper")

#: Longest wait between two looks at the deadlines.
TICK_S = 0.1
#: After this process was frozen (a look came ``STALL_S`` late), prefork runs are left for
#: this long to the lease keeper's heartbeat, sent at once after a freeze: the pool
#: processes renew their own leases while only the worker's process is stopped
#: (``worker/thaw_guard.py``), and they stop themselves as they thaw if the lease was lost.
THAW_GRACE_S = 2.0

_slot: deadline_guard.GuardSlot | None = None
#: Tags of tasks that announced their start (:func:`run_starts`), until the watch's next scan
#: of Celery's running requests (which shows them while they run) or their claims end: the
#: watch counts them with the running requests (a task may start between the two).
_starting: set[str] = set()
#: Orders a start's lowering of the guard's deadline with the watch's setting of it.
_slot_lock = native_lock()


class LeaseWatch(HelperThread):
    """Stops the runs of this process whose leases are past sure (module docstring)."""

    def __init__(self, slot: deadline_guard.GuardSlot | None) -> None:
        super().__init__(name="celery-plus lease watch", daemon=True)
        self.slot = slot
        self._stopping = NativeEvent()
        #: Tags whose runs were stopped (a killed pool process is reported lost later).
        self._stopped: set[str] = set()
        self._looked_at = clock()
        self._thawed_at = float("-inf")

    def stop(self) -> None:
        self._stopping.set()

    def run(self) -> None:
        while not self._stopping.wait(TICK_S):
            try:
                self.look()
            except Exception:  # never let the watch die: log, look again next tick
                logger.exception("celery-plus lease watch: look failed")

    def look(self) -> None:
        now = clock()
        if now - self._looked_at > STALL_S:
            self._thawed_at = now  # this process was frozen: its view of the leases is old
        self._looked_at = now
        books = holdings.every()
        with _slot_lock:
            announced = set(_starting)  # before the scan: the scan shows them if still running
        running = running_tags()
        for book in books:
            overdue = book.overdue(now)
            if overdue:
                stop_overdue_runs(overdue, running, book.lease_s, self._stopped,
                                  pool_processes=now - self._thawed_at >= THAW_GRACE_S)
        if self.slot is not None:
            with _slot_lock:  # a task started since the scan is in _starting (run_starts)
                tags = set(running) | _starting
                self.slot.set(min((b.sure_of_runs(tags) for b in books),
                                  default=float("inf")))
                # A run announced before the scan is in ``running`` while it goes on; one
                # that is not has ended, even if its ack could not be stored (its claim is
                # still held): it needs no guard, and the guard must not kill the worker
                # for it when the lease of that claim passes sure (a store refusing writes).
                _starting.difference_update(announced)
                _starting.difference_update(
                    [t for t in _starting if all(b.sure_of_runs([t]) == float("inf")
                                                 for b in books)])


_watch: LeaseWatch | None = None


def start(in_process_pool: bool) -> LeaseWatch:
    """Start the lease watch of this worker (once); ``in_process_pool``: its tasks run in
    this process (solo, threads, green pools), so a guard process backs the watch."""
    global _slot, _watch
    if _watch is not None:
        return _watch
    if in_process_pool:
        _slot = deadline_guard.GuardSlot()
        deadline_guard.start(_slot)
    _watch = LeaseWatch(_slot)
    _watch.start()
    return _watch


def run_starts(tag: str) -> None:
    """A task of delivery ``tag`` starts in this process: the guard's deadline covers it
    before the task's code runs (nothing to do where no guard watches)."""
    if _slot is None:
        return
    book = holdings.find(tag)
    if book is not None:
        with _slot_lock:
            _starting.add(tag)
            _slot.lower(book.sure_of_runs([tag]))


def _after_fork_in_child() -> None:
    global _slot, _watch, _slot_lock
    _slot = _watch = None  # a pool process: its parent's watch and guard are not its own
    _slot_lock = native_lock()
    _starting.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)

__all__ = ["TICK_S", "LeaseWatch", "run_starts", "start"]
