"""A prefork pool process holds its task once the task's lease is lost or past sure.

A worker frozen past its leases (``SIGSTOP`` of its process group, a cgroup freeze) finds,
once it thaws, that another worker recovered the job its pool process was running and runs
it under a live claim. The lease keeper stops such a run (``worker_state.stop_stale_runs``:
SIGTERM to the pool process), but only after a keeper turn, a heartbeat and a signal: for
those milliseconds (0.3 s on a loaded machine) the stale run went on beside the live one,
and a ``concurrency=1`` group ran two jobs at once.

So each pool process watches its own thaw: the kernel sends ``SIGCONT`` to every process it
continues, and Python runs the handler (:func:`_check`) before the task's next bytecode.
While a claimed task runs here and its lease is not certainly still ours (the claim's sure
time, handed to the task with its delivery, has passed), the handler asks the store, the
task paused meanwhile (a heartbeat of that one claim, from a helper thread with a time limit:
the paused task may hold a lock the call needs). A lease the store confirms lets the task go
on; a lost one, or one the store did not confirm within ``ANSWER_S``, keeps the task held
there (:func:`_hold_here`) until the keeper's SIGTERM, which the worker sends as it learns
the same (billiard's handler raises SystemExit in the pause, the parent reports the job's
worker lost, its settle is a fenced no-op, and a new process takes its place); should it not
come, the process stops itself after ``STOP_WAIT_S``.

A worker whose own process alone stops (a debugger attached to it, ``SIGSTOP`` of its pid)
while its pool process runs on is the other way round: nothing renewed
the lease of the task still running, another worker took the job over and both ran it at once.
So each pool process also renews the lease of the task it runs itself, every heartbeat
interval (``_renew``: one heartbeat of that claim, as the worker's keeper sends; the two
together cost the store one more heartbeat per running task and interval), and keeps the
claim's deadline itself, since the worker's lease watch lives in the stopped process: a
renewal the store confirms makes the claim sure for ``SURE_SHARE`` of the lease from when it
was sent (the worker's rule, through a :class:`~celery_plus.leases.holdings.Holdings` ledger
of the one claim). Once the store says the lease is lost, or once the sure time passes with
no renewal confirmed (the store unreachable, or a call stalled), the renewal loop has the
task's thread run the same check (:data:`HOLD_SIGNAL`, sent to that thread): the task is
held at once and stopped as at a thaw. While an unconfirmed claim's task is held, the
renewal loop asks the store on (the held thread makes no store call: it may have been
interrupted inside one, holding a lock the answer needs), and a confirmation releases it.
A task's start only notes it in a global: the renewal thread wakes on its own timer (an interval
after the start it saw, or the sure time if earlier), so a task costs the pool process no
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

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from billiard.common import TERM_SIGNAL, terminate_handler_fired
from celery import signals

from celery_plus.coordination.start_check import coordinated_claim, coordination_heartbeat
from celery_plus.leases.holdings import Holdings
from celery_plus.leases.keeper import clock
from celery_plus.leases.start_check import (
    Heartbeat,
    LeaseUnknown,
    broker_heartbeat,
)
from celery_plus.leases.tokens import SURE_UNTIL, delivery_tag, parse_delivery_tag
from celery_plus.runtime import process_tree
from celery_plus.runtime.helper_threads import HelperThread, native_lock

logger = logging.getLogger("celery_plus.transport")

#: Longest pause of a thawed task while the store is asked about its lease.
ANSWER_S = 2.0
#: How long a task held for a lost or unconfirmed lease waits for its worker's SIGTERM
#: before its process stops itself.
STOP_WAIT_S = 5.0
#: How long a pool process told to end (SIGTERM: SystemExit raised in its task) may take to
#: unwind its task while its claim is not ours, before it is killed.
EXIT_GRACE_S = 1.0
#: The signal the renewal loop sends the task's thread to have it check, and hold, the task
#: (:func:`_check`): a real-time one, since billiard takes SIGUSR1 (soft time limits) and
#: sets the other terminating signals (SIGUSR2, SIGALRM, ...) to end the process, and Celery's
#: rdb takes SIGUSR2.
HOLD_SIGNAL = signal.SIGRTMIN + 3


class _Running:
    """The claimed task running in this pool process, if any: its claim (a delivery of the
    ``plus`` transport, or a claim in the coordination store), how to ask its store, and
    until when the claim is certainly ours (the sure time handed over with the delivery,
    extended by each renewal the store confirms, by the worker's own rule: a ledger of the
    one claim, :class:`~celery_plus.leases.holdings.Holdings`)."""

    def __init__(self, tag: str, claim: tuple[str, int], sure_until: float, name: str,
                 heartbeat: Heartbeat, timing: Callable[[], tuple[float, float]],
                 task_id: str = "") -> None:
        self.tag = tag
        self.task_id = task_id
        self.claim = claim
        self.sure_until = sure_until
        self.name = name
        #: Renews the claim and answers its verdict (``JobStore.heartbeat``).
        self.heartbeat = heartbeat
        #: (heartbeat interval, lease) of the claim's store: its worker's keeper renews at
        #: the interval, and the lease is what a confirmed renewal is worth.
        self.timing = timing
        #: When the task started here (a :func:`clock` time): its first renewal is due an
        #: interval later.
        self.started = clock()
        self.due: float | None = None
        #: The renewals this process sent, and those the store confirmed (made at the first).
        self.book: Holdings | None = None
        #: The store said another worker may run the job now.
        self.lost = False
        #: The store said the task's own run ended the claim (acked early, a retry or
        #: ``Task.replace``): nothing left to keep or lose.
        self.ended = False
        #: Checks the task's thread finished (:func:`_check`): the renewal loop waits for one.
        self.checks = 0
        #: The task's thread is in one of celery-plus's own store calls (:func:`store_call`:
        #: the start check, a rate-limited start), which may hold a store lock (a SQLite
        #: write): a hold waits for the call's end, and its clock() time when it began.
        self.in_store_call = 0
        self.store_call_since = 0.0

    def sure(self) -> float:
        """Until when the claim is certainly ours (the delivery's sure time, or later)."""
        book = self.book
        confirmed = book.sure_until(self.tag) if book is not None else None
        return self.sure_until if confirmed is None else max(self.sure_until, confirmed)

    def renew(self) -> None:
        """Renew the claim once and note the store's verdict; raises :class:`LeaseUnknown`
        when the store does not answer."""
        try:
            book = self._ledger()
            asked_at = clock()
            verdicts = self.heartbeat([self.claim])
        except Exception as exc:
            raise LeaseUnknown(f"could not renew the lease of job {self.claim[0]} from its "
                               f"pool process ({exc!r})") from exc
        ends = book.confirmed([self.claim], verdicts, asked_at)
        self.lost = self.lost or bool(ends.lost)
        self.ended = self.ended or bool(ends.ended)

    def _ledger(self) -> Holdings:
        """The claim's ledger, made at the first renewal (by one of the threads that may
        renew at once: the renewal loop's and a thaw's)."""
        with _ledger_lock:
            if self.book is None:
                _, lease_s = self.timing()
                book = Holdings(lease_s)
                book.hold(*self.claim, float("-inf"))  # unconfirmed until a renewal is
                self.book = book
            return self.book


#: Guards the making of a claim's ledger (:meth:`_Running._ledger`).
_ledger_lock = native_lock()


_running: _Running | None = None
#: Set once, by the first claimed task of this process: the renewal loop's start.
_first = threading.Event()
#: How long the renewal loop sleeps while no claimed task runs: the shortest heartbeat
#: interval seen (a task started meanwhile is still renewed an interval after its start).
_idle_s = 1.0


def _task_started(sender: Any = None, task_id: str = "", task: Any = None,
                  **_: Any) -> None:
    global _running
    if getattr(getattr(task, "request", None), "is_eager", False):
        return  # a task applied inside the running one (``apply()``): the outer one runs on
    _running = None
    running = _claimed_run(task)
    if running is None:
        return
    running.task_id = task_id
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
    heartbeat, interval, lease_s = store
    return _Running(delivery_tag(job_id, token), (job_id, token), sure_until, task.name,
                    heartbeat, lambda: (interval, lease_s))


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
                    lambda: _timing(app))


def _task_ended(sender: Any = None, task_id: str = "", task: Any = None, **_: Any) -> None:
    global _running
    running = _running
    if running is not None and running.task_id and running.task_id != task_id:
        return  # an eager task applied inside the running one ended: the outer one runs on
    _running = None


#: True while :func:`_check` runs in the task's thread (a signal handler): a second signal
#: meanwhile (a thaw and the renewal loop's request at once) leaves the check to it.
_checking = False


def _check(signum: int, frame: Any) -> None:
    """In the task's thread, before its next bytecode: on ``SIGCONT`` (this process thawed)
    and on :data:`HOLD_SIGNAL` (the renewal loop found the claim lost, or past its sure time
    unconfirmed). A claim certainly ours lets the task go on; otherwise the task is held here
    (:func:`_hold_here`). At a thaw the store is asked first, the task paused meanwhile (at
    most ``ANSWER_S``); at the renewal loop's request it is not (the loop asked already, and
    goes on asking while the task is held: the store's confirmation releases it)."""
    global _checking
    running = _running
    if (running is not None and terminate_handler_fired() and not _goes_on(running)
            and clock() - _told_to_end() >= EXIT_GRACE_S):
        # Told to end (billiard's handler raised SystemExit in the task) EXIT_GRACE_S ago,
        # yet the task's thread runs on with a claim not ours: its code caught the
        # SystemExit. Nothing else would stop it (the worker's SIGTERM was that exit). A
        # check sooner (a SIGCONT handled after the SIGTERM, while the exit unwinds) lets
        # the exit go on.
        logger.warning("celery-plus: task %s[%s] killed in its pool process: it ran on after "
                       "it was stopped for its lost or unconfirmed lease", running.name,
                       running.claim[0])
        _kill_self()
    if (running is None or _in_store_call(running) or _checking
            or terminate_handler_fired()):
        # No claimed task here, one inside celery-plus's own store call (held as the call
        # ends: store_call), a check under way (this signal nested in it), or the process
        # on its way out: its terminate handler raised SystemExit, which may be unwinding
        # through the task's code now (a hold would only delay the exit).
        return
    _checking = True
    try:
        if _goes_on(running):
            return  # certainly ours: no round trip
        if signum != HOLD_SIGNAL and not running.lost:
            _renewed_within(running, ANSWER_S)
            if _goes_on(running):
                return
        _hold_here(running, frame)
    finally:
        _checking = False
        running.checks += 1


def _in_store_call(running: _Running) -> bool:
    """Whether the task's thread is in celery-plus's own store call, for less than
    ``ANSWER_S`` (one stuck longer is held inside: the hold is then no worse)."""
    return bool(running.in_store_call) and clock() - running.store_call_since < ANSWER_S


@contextlib.contextmanager
def store_call() -> Iterator[None]:
    """Around a store call celery-plus makes in the task's thread (the start check, a rate-
    limited start): the task is not held inside it, where it may hold a store lock (a SQLite
    write: a hold there stalled every worker of the store for the hold's 5 s). A verdict that
    came meanwhile (lost, or the sure time passed unconfirmed) holds the task as the call
    ends; a call that raised (the task does not start) leaves it to its end."""
    running = _running
    if running is None:
        yield
        return
    if not running.in_store_call:
        running.store_call_since = clock()
    running.in_store_call += 1
    try:
        yield
    finally:
        running.in_store_call -= 1
    if not running.in_store_call:
        _check(signal.SIGCONT, None)  # asks the store first when the sure time has passed


#: When this process was first seen told to end (billiard's terminate handler had fired).
_told_at: float | None = None


def _told_to_end() -> float:
    """When this process was first seen told to end (now, if this is the first look)."""
    global _told_at
    if _told_at is None:
        _told_at = clock()
    return _told_at


def _kill_self() -> None:
    """Kill this pool process, and first every process its task started below it (they
    would run on beside the job's next run: ``runtime/process_tree.py``)."""
    process_tree.kill_own_descendants()
    os.kill(os.getpid(), signal.SIGKILL)


def _goes_on(running: _Running) -> bool:
    """Whether the task may go on: its own run ended the claim, or it is certainly ours."""
    return running.ended or (not running.lost and clock() < running.sure())


def _hold_here(running: _Running, frame: Any) -> None:
    """Hold the task in its thread (a signal handler) and wait for the worker's SIGTERM,
    which its keeper sends as it learns the same (billiard's handler raises SystemExit in
    this wait: the parent reports the job's worker lost, its settle is a fenced no-op, a new
    process takes this one's place). One stopper: a second SIGTERM would cut the task's
    clean-up short. A claim the store confirms meanwhile (the renewal loop asks on) releases
    the task; should neither come within ``STOP_WAIT_S`` (the worker's own process is
    stopped, or cannot reach the store either), this process stops itself."""
    why = ("its lease was lost (another worker may run the job now)" if running.lost else
           "its lease could not be confirmed before its sure time passed (the store did "
           "not answer; another worker may take the job over at its deadline)")
    logger.warning("celery-plus: task %s[%s] held in its pool process: %s",
                   running.name, running.claim[0], why)
    deadline = clock() + STOP_WAIT_S
    raised: Exception | None = None
    while (left := deadline - clock()) > 0:
        if _goes_on(running):
            logger.warning("celery-plus: task %s[%s] goes on: the store confirmed its lease",
                           running.name, running.claim[0])
            if raised is not None:
                raise raised  # raised by another signal's handler while held: now it may
            return
        try:
            time.sleep(min(left, 0.01))  # a signal's handler runs in it: SIGTERM ends it
        except Exception as exc:
            # Another handler's exception (a soft time limit, an alarm): caught by the task,
            # it would let the task out of its hold. Kept for when the task may go on.
            raised = exc
    logger.warning("celery-plus: task %s[%s] stopped here: its worker did not stop it within "
                   "%.0f s", running.name, running.claim[0], STOP_WAIT_S)
    stop = signal.getsignal(TERM_SIGNAL)
    if callable(stop):
        process_tree.kill_own_descendants()  # the run's own processes stop with it
        stop(TERM_SIGNAL, frame)  # billiard's: raises SystemExit, the process ends
    # No handler to end it (REMAP_SIGTERM leaves SIGTERM ignored in pool processes): the
    # task must not go on.
    _kill_self()


_timings: dict[int, tuple[float, float]] = {}


def _timing(app: Any) -> tuple[float, float]:
    """(heartbeat interval, lease) of the app's plus transport (its keeper renews at the
    interval; a confirmed renewal is worth the lease's sure share)."""
    if id(app) not in _timings:
        with app.pool.acquire(block=True) as connection:
            config = connection.transport.config
            _timings[id(app)] = (float(config.heartbeat_interval),
                                 float(config.visibility_timeout))
    return _timings[id(app)]


def _renew() -> None:
    """Keep the claim of each task that runs in this process (:func:`_keep`), from the first
    claimed task on, looking for it on its own timer (no wake-up per task)."""
    _first.wait()
    while True:
        running = _running
        if running is None or running.ended:
            time.sleep(_idle_s)  # nothing to keep (a claim its own run ended stays ended)
        else:
            _keep(running)


def _keep(running: _Running) -> None:
    """Renew the claim of ``running`` every heartbeat interval of its store from its start,
    while it runs here, and hold the task (:func:`_hold`) once the store says its lease is
    lost, or once its sure time passed without a renewal the store confirmed (this process
    enforces the deadline itself: the worker's lease watch lives in its main process, which
    may be the one stopped). It sleeps until the next renewal or the sure time and returns
    once another task (or none) runs here: a task that ended meanwhile ended before that
    renewal was due, so the next one is still kept from its own start."""
    global _idle_s
    try:
        interval, _ = running.timing()
    except Exception:  # no store to ask now: each renewal tries again, the deadline holds
        interval = _idle_s
    _idle_s = min(_idle_s, interval)
    if running.due is None:
        running.due = _next_renewal(running.started, interval, running.sure())
        if clock() >= running.sure():
            # Started past the delivery's sure time: the start check asks the store too,
            # and the task's code waits for it; ask from here rather than hold the task
            # inside that call (it may hold a lock the answer needs).
            _renewed_within(running, ANSWER_S)
    while _running is running and not running.ended:
        now, sure = clock(), running.sure()
        if (running.lost or now >= sure) and _in_store_call(running):
            # In celery-plus's own store call: held as it ends (store_call), or here once
            # it has lasted ANSWER_S (stuck: a hold inside it is then no worse).
            if not running.lost:
                _renewed_within(running, min(ANSWER_S, 0.05))
            time.sleep(0.01)
            continue
        if running.lost or now >= sure:
            _hold(running)
            return
        if now < running.due:
            time.sleep(min(running.due, sure) - now)
            continue
        _renewed_within(running, sure - now)
        running.due = _next_renewal(clock(), interval, running.sure())


#: The shortest wait between two renewals of one claim, as a share of the interval (a store
#: refusing at once is not asked in a tight loop as the sure time nears).
MIN_RENEWAL_GAP = 0.25


def _next_renewal(now: float, interval: float, sure: float) -> float:
    """When to renew next: an interval from ``now``, but no later than halfway to the sure
    time, so a claim whose sure time comes before the interval (a delivery that waited in the
    pool's queue, an interval close to the lease) is asked about before it, not held at it."""
    return max(now + MIN_RENEWAL_GAP * interval, min(now + interval, (now + sure) / 2))


def _hold(running: _Running) -> None:
    """Have the task's thread hold the task before its next bytecode (:func:`_check`), and
    ask the store on meanwhile (a confirmation releases it) until that thread's check is
    over: the task goes on, or its process stops. A task whose thread never runs the check
    (stuck in C code) is killed once the hold would be over."""
    if terminate_handler_fired():
        # Its process was told to end: it exits as the task unwinds. A task still here
        # after EXIT_GRACE_S caught the SystemExit: the check below kills it (_check).
        time.sleep(max(0.0, _told_to_end() + EXIT_GRACE_S - clock()))
    checks = running.checks
    signal.pthread_kill(threading.main_thread().ident or 0, HOLD_SIGNAL)
    deadline = clock() + STOP_WAIT_S + 2.0
    while _running is running and running.checks == checks:
        if clock() > deadline:
            logger.warning("celery-plus: task %s[%s] killed in its pool process: it did not "
                           "stop for its lost or unconfirmed lease", running.name,
                           running.claim[0])
            _kill_self()
        if not running.lost:
            _renewed_within(running, ANSWER_S)
        time.sleep(0.05)  # the check notices a confirmation within 10 ms


def _renewed_within(running: _Running, limit: float) -> bool:
    """Renew the claim from a helper thread, waiting at most ``limit`` seconds for the store
    (the waiting thread may be the paused task, which may hold a lock the call needs, or the
    renewal loop, whose deadline a stalled call must not hold); whether it answered in time
    (its verdict is on ``running``)."""
    answered: list[bool] = []

    def ask() -> None:
        try:
            running.renew()
        except LeaseUnknown as exc:
            logger.info("celery-plus: %s", exc)
            return
        answered.append(True)

    helper = HelperThread(target=ask, name="celery-plus pool lease check", daemon=True)
    helper.start()
    helper.join(max(limit, 0.0))
    return bool(answered)


def watch_pool_process(**_: Any) -> None:
    """In each prefork pool process: note the plus task running here, watch for a thaw and
    for the renewal loop's requests to hold the task.

    Not in the worker's own process (the solo pool sends ``worker_process_init`` there too):
    nothing would stop its task, and a SIGTERM there is the worker's own shutdown."""
    from billiard.process import current_process

    if current_process().name == "MainProcess":
        return
    signals.task_prerun.connect(_task_started, weak=False)
    signals.task_postrun.connect(_task_ended, weak=False)
    signal.signal(signal.SIGCONT, _check)
    signal.signal(HOLD_SIGNAL, _check)
    HelperThread(target=_renew, name="celery-plus pool lease renewal", daemon=True).start()


__all__ = ["ANSWER_S", "HOLD_SIGNAL", "STOP_WAIT_S", "store_call", "watch_pool_process"]
