"""The pool guards (``celery_plus/pool_guards.py``) on Celery's own pools.

A reconnect's flush keeps the jobs already handed to a pool process: Celery's own prefork pool
(``AsynPool``, one real process) on a kombu hub driven step by step. A job is written to the
process, and before the pool reads the process's acknowledgement the consumer's reconnect resets
the hub and flushes the pool, as ``Consumer.on_close`` does. The process runs the job either
way; its result must still reach the worker (whose callback acks the delivery), or the delivery
is dropped, its claim given back, and the job runs again.

A task leaving with SystemExit or KeyboardInterrupt in the solo and threads pools reaches the
request's success callback as Celery's failure triple of a lost worker.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from billiard.einfo import ExceptionInfo
from celery import Celery
from celery.concurrency import solo, thread
from celery.concurrency.prefork import TaskPool
from celery.exceptions import WorkerLostError
from kombu.asynchronous import Hub

from celery_plus.pool_guards import keep_handed_jobs, report_base_exceptions


def mark(path: str) -> int:
    """The job: note that it ran, in which process."""
    with open(path, "a") as out:
        out.write(f"{os.getpid()}\n")
    return os.getpid()


@pytest.fixture
def pool() -> Iterator[TaskPool]:
    app = Celery("flush", set_as_current=False)
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
