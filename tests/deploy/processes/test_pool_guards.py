"""The pool guards (``celery_plus/worker/pool_guards.py``) on Celery's own pools.

A reconnect's flush keeps the jobs already handed to a pool process: Celery's own prefork pool
(``AsynPool``, one real process) on a kombu hub driven step by step. A job is written to the
process, and before the pool reads the process's acknowledgement the consumer's reconnect resets
the hub and flushes the pool, as ``Consumer.on_close`` does. The process runs the job either
way; its result must still reach the worker (whose callback acks the delivery), or the delivery
is dropped, its claim given back, and the job runs again.

A job handed to a pool process that dies before the pool reads its acknowledgement runs once:
the process reads the job, starts it and dies (``os._exit``, as a segfault would); billiard's
supervisor, which found the process alive when it flushed the exited processes' queues and dead
when it looked at their jobs (two processes dying at once on a loaded machine), handles the job
as one no process accepted (``on_job_process_down``). It must be reported as a lost worker, not
sent to the replacement process to run again under the same delivery.

A task leaving with SystemExit or KeyboardInterrupt in the solo and threads pools reaches the
request's success callback as Celery's failure triple of a lost worker.
"""

from __future__ import annotations

import multiprocessing.util
import os
import signal
import threading
import time
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from billiard.einfo import ExceptionInfo
from celery import Celery
from celery.concurrency import prefork, solo, thread
from celery.concurrency.asynpool import _get_job_writer
from celery.concurrency.prefork import TaskPool
from celery.exceptions import WorkerLostError
from kombu.asynchronous import Hub

from celery_plus.worker.pool_guards import (
    count_handed_jobs,
    keep_handed_jobs,
    report_base_exceptions,
)


def mark(path: str) -> int:
    """The job: note that it ran, in which process."""
    with open(path, "a") as out:
        out.write(f"{os.getpid()}\n")
    return os.getpid()


def _bare_process(*_: Any) -> None:
    """The pool processes' initializer: nothing. The jobs here are plain functions, and
    Celery's own initializer would also run whatever this test process has connected to
    ``worker_process_init`` (other tests' apps, fixups) in every replacement process."""


@pytest.fixture
def pool(monkeypatch: pytest.MonkeyPatch) -> Iterator[TaskPool]:
    monkeypatch.setattr(prefork, "process_initializer", _bare_process)
    # Nor do they run the test process's after-fork hooks (billiard runs multiprocessing's):
    # kombu's closes every connection pool other tests left, and a Redis one whose channel
    # was left waiting in BRPOP blocks the new process reading its socket before it starts
    # (seen with py-spy in a full-suite run, where these tests failed).
    monkeypatch.setattr(multiprocessing.util, "_afterfork_registry",
                        weakref.WeakValueDictionary())
    app = Celery("flush", set_as_current=False)
    # A replacement process slow to start on a loaded machine is waited for, not killed
    # (billiard's default is 4 s, then SIGKILL and another fork).
    app.conf.worker_proc_alive_timeout = 30.0
    pool = TaskPool(1, threads=False, app=app, initargs=(app, "flush@test"))
    pool.start()
    yield pool
    pool.terminate()


def _steps(hub: Hub, until: Any, timeout: float = 20.0) -> None:
    loop = hub.create_loop()
    deadline = time.monotonic() + timeout
    while not until():
        assert time.monotonic() < deadline, "the pool never got there"
        next(loop)


def _run_through_reconnect(pool: TaskPool, tmp_path: Path) -> tuple[list[Any], Path]:
    hub = Hub()
    pool.register_with_event_loop(hub)
    ran = tmp_path / "ran"
    results: list[Any] = []
    pool.apply_async(mark, (str(ran),), callback=results.append)
    (job,) = pool._pool._cache.values()
    _steps(hub, lambda: job._write_to is not None)  # written to the process
    assert not job._accepted, "the process's acknowledgement was read already"
    hub.reset()  # the event loop ends on the connection error...
    pool.flush()  # ...and Consumer.on_close flushes the pool
    pool.register_with_event_loop(hub)  # the consumer reconnects
    _steps(hub, lambda: results or (ran.exists() and not pool._pool._cache), timeout=20)
    if not results:  # give a late result its chance
        deadline = time.monotonic() + 1.0
        _steps(hub, lambda: results or time.monotonic() > deadline)
    return results, ran


def test_a_job_handed_to_a_pool_process_keeps_its_result_across_a_flush(
        pool: TaskPool, tmp_path: Path) -> None:
    keep_handed_jobs(pool)
    results, ran = _run_through_reconnect(pool, tmp_path)
    assert ran.read_text().split() == [str(r) for r in results], "ran once, result kept"


def test_without_it_celerys_flush_drops_the_result_of_a_job_that_ran(
        pool: TaskPool, tmp_path: Path) -> None:
    """What the module guards against (if Celery changes this, the guard may go)."""
    results, ran = _run_through_reconnect(pool, tmp_path)
    assert ran.exists() and results == []


# -- a job whose process dies before the pool reads its acknowledgement ----------------------
def mark_and_die(path: str) -> None:
    mark(path)
    os._exit(3)  # as a segfault, or an os._exit in the task


def _run_job_of_a_process_dead_unacknowledged(
        pool: TaskPool, tmp_path: Path, target: Any, before_read: bool = False,
) -> tuple[list[Any], list[Any], Path]:
    """Hand a job to the pool's one process and let that process die before the pool reads
    its acknowledgement; the supervisor then handles the job as billiard's does for a process
    it found alive as it flushed exited processes' queues and dead as it looked at their jobs
    (``_join_exited_workers``). ``before_read``: the process is stopped before the job is
    written and killed before it reads it (a pool process killed while idle)."""
    hub = Hub()
    pool.register_with_event_loop(hub)
    ran = tmp_path / "ran"
    ran.touch()
    results: list[Any] = []
    failures: list[Any] = []
    (proc,) = pool._pool._pool
    if before_read:
        warm: list[Any] = []  # the process is up and has taken a job: the pool writes to it
        pool.apply_async(mark, (str(tmp_path / "warm"),), callback=warm.append)
        _steps(hub, lambda: bool(warm) and not pool._pool._cache)
        os.kill(proc.pid, signal.SIGSTOP)
    try:
        pool.apply_async(target, (str(ran),), callback=results.append,
                         error_callback=failures.append)
        (job,) = pool._pool._cache.values()
        _steps(hub, lambda: job._write_to is not None and _get_job_writer(job) is None)
        assert not job._accepted, "the process's acknowledgement was read already"
    finally:
        if before_read:
            os.kill(proc.pid, signal.SIGKILL)
    deadline = time.monotonic() + 20
    while proc._is_alive():  # the process dies; the pool is not told yet
        assert time.monotonic() < deadline, "the process never died"
        time.sleep(0.01)
    pool._pool.on_job_process_down(job, proc.pid)
    asyn = pool._pool

    def settled() -> bool:  # the job reported, and nothing of it left in the pool
        return (bool(results or failures) and not asyn._cache and not asyn.outbound_buffer
                and not asyn._active_writers and bool(asyn._pool)
                and all(p._is_alive() for p in asyn._pool))

    _steps(hub, lambda: settled() or len(ran.read_text().split()) >= 2, timeout=30)
    deadline = time.monotonic() + 0.5  # a second run, if one is coming, has its chance
    _steps(hub, lambda: len(ran.read_text().split()) >= 2 or time.monotonic() > deadline)
    return results, failures, ran


def test_a_job_whose_process_died_running_it_unacknowledged_is_a_lost_worker_not_run_again(
        pool: TaskPool, tmp_path: Path) -> None:
    count_handed_jobs(pool)
    _results, failures, ran = _run_job_of_a_process_dead_unacknowledged(
        pool, tmp_path, mark_and_die)
    assert len(ran.read_text().split()) == 1, "ran once"
    (einfo,) = failures
    exc = getattr(einfo.exception, "exc", einfo.exception)  # ExceptionWithTraceback
    assert isinstance(exc, WorkerLostError), exc


def test_a_job_whose_process_died_before_reading_it_runs_once_in_another(
        pool: TaskPool, tmp_path: Path) -> None:
    count_handed_jobs(pool)
    results, failures, ran = _run_job_of_a_process_dead_unacknowledged(
        pool, tmp_path, mark, before_read=True)
    assert failures == [] and [str(r) for r in results] == ran.read_text().split(), \
        "ran once, in the replacement process, and succeeded"


def test_without_it_billiard_runs_a_job_again_whose_process_died_unacknowledged(
        pool: TaskPool, tmp_path: Path) -> None:
    """What the guard prevents (if billiard changes this, the guard may go)."""
    _results, _failures, ran = _run_job_of_a_process_dead_unacknowledged(
        pool, tmp_path, mark_and_die)
    assert len(ran.read_text().split()) == 2


# -- a task raising SystemExit or KeyboardInterrupt in the solo and threads pools ----------
def leave(how: str) -> None:
    if how == "exit":
        raise SystemExit(3)
    raise KeyboardInterrupt()


def _callback_gets(pool_cls: type, how: str, guarded: bool) -> Any:
    pool = pool_cls(2)
    pool.start()
    got: list[Any] = []
    done = threading.Event()
    try:
        if guarded:
            report_base_exceptions(pool)
        pool.apply_async(leave, (how,), callback=lambda r: (got.append(r), done.set()))
        assert done.wait(10), "the callback was never called"
    finally:
        pool.stop()
    return got[0]


@pytest.mark.parametrize("how", ["exit", "interrupt"])
@pytest.mark.parametrize("pool_cls", [solo.TaskPool, thread.TaskPool], ids=["solo", "threads"])
def test_a_task_leaving_with_a_base_exception_reaches_the_callback_as_a_lost_worker(
        pool_cls: type, how: str) -> None:
    failed, einfo, _runtime = _callback_gets(pool_cls, how, guarded=True)
    exc = getattr(einfo.exception, "exc", einfo.exception)  # ExceptionWithTraceback
    assert failed and isinstance(exc, WorkerLostError), exc


def test_without_it_celerys_apply_target_hands_the_success_callback_a_bare_exception() -> None:
    """What the guard repairs (if Celery changes this, the guard may go)."""
    assert isinstance(_callback_gets(solo.TaskPool, "exit", guarded=False), ExceptionInfo)
