"""A prefork pool process thawed past its lease stops its task before the task goes on.

A worker frozen past its leases (``SIGSTOP`` of its process group, a cgroup freeze) finds,
once it thaws, that another worker recovered the job its pool process was running and runs
it under a live claim. The lease keeper stops such a run (``worker_state.stop_stale_runs``:
SIGTERM to the pool process), but only after a keeper turn, a heartbeat and a signal: for
those milliseconds (0.3 s on a loaded machine) the stale run went on beside the live one,
and a ``concurrency=1`` group ran two jobs at once.

So each pool process watches its own thaw: the kernel sends ``SIGCONT`` to every process it
continues, and Python runs the handler before the task's next bytecode. While a claimed
task runs here and its lease is not certainly still ours (the claim's sure time, handed to
the task with its delivery, has passed), the handler asks the store, the task paused
meanwhile (a heartbeat of that one claim, as ``start_check`` does, from a helper thread with
a time limit: the paused task may hold a lock the call needs). A lost lease keeps the task
paused until the keeper's SIGTERM, which the worker sends as it learns the same
(billiard's handler raises SystemExit in the pause, the parent reports the job's worker
lost, its settle is a fenced no-op, and a new process takes its place); should it not come,
the process stops itself after ``STOP_WAIT_S``. A lease still ours, or a store that does not
answer in time, lets the task go on (the keeper still stops it if the lease turns out lost).

A worker whose own process alone stops (a debugger attached to it, ``SIGSTOP`` of its pid)
while its pool process runs on is the other way round: nothing renewed
the lease of the task still running, another worker took the job over and both ran it at once.
So each pool process also renews the lease of the task it runs itself, every heartbeat
interval (``_renew``: one heartbeat of that claim, as the worker's keeper sends; the two
together cost the store one more heartbeat per running task and interval). A lease the store
says is lost is stopped as at a thaw: the worker's keeper stops it, or the process itself
after ``STOP_WAIT_S``. A task's start only notes it in a global: the renewal thread wakes on
its own timer (an interval after the start it saw), so a task costs the pool process no
thread wake-up or lock that plain Celery's does not pay (issue #29; the first claimed task of
the process alone starts the thread's loop).

A claimed task is one of two kinds, each kept by the same rules here (``_Running``: the
claim, its sure time, and how to renew it in its store): a delivery of the ``plus``
transport (tag and sure time in the message's properties; renewed through the app's broker
connection), or, on another broker, a delivery the coordination gate claimed in the
coordination store (token and sure time in the request, ``coordination/start_check.py``;
renewed through the process's own client of that store).

The solo, threads and green pools run tasks in the worker's own process, where a signal
handler cannot tell which task it would stop: their stale runs go on (``docs/reliability.md``);
their tasks stop with the worker's process, so they need no renewal of their own.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

from celery import signals

from celery_plus.coordination.start_check import coordinated_claim, coordination_heartbeat
from celery_plus.leases.keeper import clock
from celery_plus.leases.start_check import (
    Heartbeat,
    LeaseUnknown,
    asked_store,
    broker_heartbeat,
)
from celery_plus.leases.tokens import SURE_UNTIL, delivery_tag, parse_delivery_tag
from celery_plus.runtime.helper_threads import HelperThread

logger = logging.getLogger("celery_plus.transport")

#: Longest pause of a thawed task while the store is asked about its lease.
ANSWER_S = 2.0
#: How long a thawed task whose lease was lost waits for its worker's SIGTERM before it
#: stops itself.
STOP_WAIT_S = 5.0


class _Running:
    """The claimed task running in this pool process, if any: its claim (a delivery of the
    ``plus`` transport, or a claim in the coordination store) and how to ask its store."""

    def __init__(self, tag: str, claim: tuple[str, int], sure_until: float, name: str,
                 heartbeat: Heartbeat, interval: Callable[[], float]) -> None:
        self.tag = tag
        self.claim = claim
        self.sure_until = sure_until
        self.name = name
        #: Renews the claim and answers its verdict (``JobStore.heartbeat``).
        self.heartbeat = heartbeat
        #: The heartbeat interval of the claim's store (its worker's keeper renews at it).
        self.interval = interval
        #: When the task started here: its first renewal is due an interval later.
        self.started = time.monotonic()


_running: _Running | None = None
#: Set once, by the first claimed task of this process: the renewal loop's start.
_first = threading.Event()
#: How long the renewal loop sleeps while no claimed task runs: the shortest heartbeat
#: interval seen (a task started meanwhile is still renewed an interval after its start).
_idle_s = 1.0


def _task_started(sender: Any = None, task_id: str = "", task: Any = None,
                  **_: Any) -> None:
    global _running
    _running = None
    running = _claimed_run(task)
    if running is None:
        return
    if not getattr(task.request, "acks_late", getattr(task, "acks_late", True)):
        return  # acked as it was received (acks_late=False): no lease left to keep or lose
    _running = running
    if not _first.is_set():  # a flag read: no lock after the first task
        _first.set()


def _claimed_run(task: Any) -> _Running | None:
    """The claim of ``task``'s run: a coordinated delivery's claim in the coordination
    store, or a delivery of the ``plus`` transport; None for any other run."""
    request = getattr(task, "request", None)
    return _coordinated_run(task, request) or _plus_run(task, request)


def _coordinated_run(task: Any, request: Any) -> _Running | None:
    """The gate handed the claim's token and sure time to the request (``start_check``)."""
    claimed = coordinated_claim(request)
    if claimed is None:
        return None
    store = coordination_heartbeat(task.app)
    if store is None:
        return None  # an app with no coordination store: nothing to renew in
    job_id, token, sure_until = claimed
    heartbeat, interval = store
    return _Running(delivery_tag(job_id, token), (job_id, token), sure_until, task.name,
                    heartbeat, lambda: interval)


def _plus_run(task: Any, request: Any) -> _Running | None:
    """The delivery's tag and sure time are message properties of the ``plus`` transport."""
    properties = getattr(request, "properties", None)
    if not isinstance(properties, dict):
        return None
    tag, sure_until = properties.get("delivery_tag"), properties.get(SURE_UNTIL)
    claim = parse_delivery_tag(tag) if isinstance(tag, str) else None
    if claim is None or not isinstance(sure_until, (int, float)):
        return None  # not a delivery of the plus transport
    app = task.app
    return _Running(str(tag), claim, float(sure_until), task.name, broker_heartbeat(app),
                    lambda: _interval(app))


def _task_ended(**_: Any) -> None:
    global _running
    _running = None


def _on_thaw(signum: int, frame: Any) -> None:
    running = _running
    if running is None or clock() < running.sure_until:
        return  # no plus task here, or its lease is certainly still ours
    if not _lease_lost(running):
        return
    logger.warning("celery-plus: task %s[%s] held as its pool process thawed: its lease was "
                   "lost while the process was frozen (another worker runs the job now)",
                   running.name, running.claim[0])
    # The lease keeper stops it (SIGTERM: billiard's handler raises SystemExit here, in this
    # wait); until then it does not go on. One stopper, as before the thaw guard: a second
    # SIGTERM would cut the task's clean-up short.
    deadline = time.monotonic() + STOP_WAIT_S
    while time.monotonic() < deadline:
        time.sleep(0.01)
    logger.warning("celery-plus: task %s[%s] stopped here: its worker did not stop it within "
                   "%.0f s", running.name, running.claim[0], STOP_WAIT_S)
    stop = signal.getsignal(signal.SIGTERM)
    if callable(stop):
        stop(signal.SIGTERM, frame)  # billiard's: raises SystemExit, the process ends
    os.kill(os.getpid(), signal.SIGTERM)


_intervals: dict[int, float] = {}


def _interval(app: Any) -> float:
    """The heartbeat interval of the app's plus transport (its keeper renews at the same)."""
    if id(app) not in _intervals:
        with app.pool.acquire(block=True) as connection:
            _intervals[id(app)] = float(connection.transport.config.heartbeat_interval)
    return _intervals[id(app)]


def _renew() -> None:
    """Keep the claim of each task that runs in this process (:func:`_keep`), from the first
    claimed task on, looking for it on its own timer (no wake-up per task)."""
    _first.wait()
    while True:
        running = _running
        if running is None:
            time.sleep(_idle_s)
        else:
            _keep(running)


def _keep(running: _Running) -> None:
    """Renew the claim of ``running`` every heartbeat interval of its store from its start,
    while it runs here; stop it if the store says its lease is lost. It sleeps until the
    next renewal is due and returns once another task (or none) runs here: a task that ended
    meanwhile ended before that renewal was due, so the next one is still kept from its own
    start."""
    global _idle_s
    try:
        interval = running.interval()
    except Exception:  # no store to ask: the worker's own keeper renews, as before
        while _running is running:
            time.sleep(_idle_s)
        return
    _idle_s = min(_idle_s, interval)
    due = running.started + interval
    while _running is running:
        wait = due - time.monotonic()
        if wait > 0:
            time.sleep(wait)
            continue
        due = time.monotonic() + interval
        if _asked_lost(running):
            if _running is running:
                _stop_lost(running)
            return


def _stop_lost(running: _Running) -> None:
    """The lease of the task running here was lost while it ran: its worker's keeper stops
    it (one stopper, as at a thaw); should it not within ``STOP_WAIT_S``, this process does."""
    logger.warning("celery-plus: task %s[%s] lost its lease while it ran (another worker "
                   "may run the job now)", running.name, running.claim[0])
    deadline = time.monotonic() + STOP_WAIT_S
    while time.monotonic() < deadline:
        if _running is not running:
            return
        time.sleep(0.05)
    logger.warning("celery-plus: task %s[%s] stopped here: its worker did not stop it within "
                   "%.0f s", running.name, running.claim[0], STOP_WAIT_S)
    os.kill(os.getpid(), signal.SIGTERM)


def _asked_lost(running: _Running) -> bool:
    """Whether the store says the running task's lease is lost; a store that does not answer
    says nothing here (the worker's lease watch stops the run at its deadline)."""
    try:
        return asked_store(running.heartbeat, running.tag, running.claim, None)
    except LeaseUnknown as exc:
        logger.info("celery-plus: %s", exc)
        return False


def _lease_lost(running: _Running) -> bool:
    answer: list[bool] = []

    def ask() -> None:
        answer.append(_asked_lost(running))

    helper = HelperThread(target=ask, name="celery-plus thaw check", daemon=True)
    helper.start()
    helper.join(ANSWER_S)
    if not answer:
        logger.warning("celery-plus: the store did not say within %.0f s whether job %s is "
                       "still ours after this pool process thawed; the task goes on",
                       ANSWER_S, running.claim[0])
    return bool(answer and answer[0])


def watch_pool_process(**_: Any) -> None:
    """In each prefork pool process: note the plus task running here, watch for a thaw.

    Not in the worker's own process (the solo pool sends ``worker_process_init`` there too):
    nothing would stop its task, and a SIGTERM there is the worker's own shutdown."""
    from billiard.process import current_process

    if current_process().name == "MainProcess":
        return
    signals.task_prerun.connect(_task_started, weak=False)
    signals.task_postrun.connect(_task_ended, weak=False)
    signal.signal(signal.SIGCONT, _on_thaw)
    HelperThread(target=_renew, name="celery-plus pool lease renewal", daemon=True).start()


__all__ = ["ANSWER_S", "STOP_WAIT_S", "watch_pool_process"]
