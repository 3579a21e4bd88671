"""A prefork pool process thawed past its lease stops its task before the task goes on.

A worker frozen past its leases (``SIGSTOP`` of its process group, a cgroup freeze) finds,
once it thaws, that another worker recovered the job its pool process was running and runs
it under a live claim. The lease keeper stops such a run (``worker_state.stop_stale_runs``:
SIGTERM to the pool process), but only after a keeper turn, a heartbeat and a signal: for
those milliseconds (0.3 s on a loaded machine) the stale run went on beside the live one,
and a ``concurrency=1`` group ran two jobs at once.

So each pool process watches its own thaw: the kernel sends ``SIGCONT`` to every process it
continues, and Python runs the handler before the task's next bytecode. While a task of a
plus delivery runs here and its lease is not certainly still ours (the delivery's
``SURE_UNTIL`` stamp has passed), the handler asks the store, the task paused meanwhile (a
heartbeat of that one claim, as ``start_check`` does, from a helper thread with a time limit:
the paused task may hold a lock the call needs). A lost lease keeps the task paused until the
keeper's SIGTERM, which the worker sends as it learns the same (billiard's handler raises
SystemExit in the pause, the parent reports the job's worker lost, its settle is a fenced
no-op, and a new process takes its place); should it not come, the process stops itself
after ``STOP_WAIT_S``. A lease still ours, or a store that does not answer in time, lets the
task go on (the keeper still stops it if the lease turns out lost).

The solo, threads and green pools run tasks in the worker's own process, where a signal
handler cannot tell which task it would stop: their stale runs go on (``docs/reliability.md``).
"""

from __future__ import annotations

import logging
import os
import signal
import time
from typing import Any

from celery import signals

from ..helper_threads import HelperThread
from ..lease_keeper import clock
from .channel import SURE_UNTIL, parse_delivery_tag
from .start_check import lost_in_store

logger = logging.getLogger("celery_plus.transport")

#: Longest pause of a thawed task while the store is asked about its lease.
ANSWER_S = 2.0
#: How long a thawed task whose lease was lost waits for its worker's SIGTERM before it
#: stops itself.
STOP_WAIT_S = 5.0


class _Running:
    """The plus delivery whose task runs in this pool process, if any."""

    def __init__(self, app: Any, tag: str, claim: tuple[str, int], sure_until: float,
                 name: str) -> None:
        self.app = app
        self.tag = tag
        self.claim = claim
        self.sure_until = sure_until
        self.name = name


_running: _Running | None = None


def _task_started(sender: Any = None, task_id: str = "", task: Any = None,
                  **_: Any) -> None:
    global _running
    _running = None
    properties = getattr(getattr(task, "request", None), "properties", None)
    if not isinstance(properties, dict):
        return
    tag, sure_until = properties.get("delivery_tag"), properties.get(SURE_UNTIL)
    claim = parse_delivery_tag(tag) if isinstance(tag, str) else None
    if claim is None or not isinstance(sure_until, (int, float)):
        return  # not a delivery of the plus transport
    _running = _Running(task.app, str(tag), claim, float(sure_until), task.name)


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


def _lease_lost(running: _Running) -> bool:
    answer: list[bool] = []

    def ask() -> None:
        answer.append(lost_in_store(running.app, running.tag, running.claim, None))

    helper = HelperThread(target=ask, name="celery-plus thaw check", daemon=True)
    helper.start()
    helper.join(ANSWER_S)
    if not answer:
        logger.warning("celery-plus: the store did not say within %.0f s whether job %s is "
                       "still ours after this pool process thawed; the task goes on",
                       ANSWER_S, running.claim[0])
    return bool(answer and answer[0])


@signals.worker_process_init.connect(weak=False)
def install(**_: Any) -> None:
    """In each prefork pool process: note the plus task running here, watch for a thaw.

    Not in the worker's own process (the solo pool sends ``worker_process_init`` there too):
    nothing would stop its task, and a SIGTERM there is the worker's own shutdown."""
    from billiard.process import current_process

    if current_process().name == "MainProcess":
        return
    signals.task_prerun.connect(_task_started, weak=False)
    signals.task_postrun.connect(_task_ended, weak=False)
    signal.signal(signal.SIGCONT, _on_thaw)


__all__ = ["ANSWER_S", "STOP_WAIT_S", "install"]
