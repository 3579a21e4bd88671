"""Issue #11 in real workers: fenced continuations, poison failure details, key changes, holds.

* A worker frozen past its lease (``SIGSTOP``) whose job was recovered and runs elsewhere calls
  ``self.retry()`` late: the retry changes nothing. The job is not scheduled a third time, and
  the live claim keeps its ``concurrency=1`` slot (the group never runs two jobs at once).
* Tasks failing with a lone surrogate, a NUL or a megabyte in their message are dead-lettered
  with those details, the normal tasks settled in the same batches are completed exactly once,
  and the worker stays up; so does a solo or threads worker whose task raises SystemExit or
  KeyboardInterrupt (dead-lettered after its deliveries, as a prefork pool process's exit is).
* A job that continues under another unique key (``Task.replace``, ``retry(args=...)``)
  leaves no key held once it finished.
* A unique job waiting longer than the backstop (countdown) or running longer than it keeps
  its key: a duplicate is refused and the job runs once.

Each runs on every durable store (``broker_kind``).
"""

from __future__ import annotations

import os
import signal
import sqlite3
from collections.abc import Callable
from typing import Any

import pytest

from celery_plus.model.store import Backend
from tests.deploy.matrix import pools
from tests.inspectors import inspector_for

from .conftest import Worker, wait_until
from .proj import events

VT = {"PLUS_TEST_VT": "2"}


def _freeze(worker: Worker, view: Backend) -> None:
    """SIGSTOP the worker's processes, at an instant they hold no SQLite write lock.

    A process stopped inside a write transaction blocks every writer of a SQLite file (one
    host, one file lock) until it resumes: nothing to test there but that.
    """
    path = getattr(view, "path", None)
    for _ in range(50):
        os.killpg(worker.proc.pid, signal.SIGSTOP)
        if path is None:
            return
        conn = sqlite3.connect(path, timeout=0.5, isolation_level=None)
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("ROLLBACK")
            return
        except sqlite3.OperationalError:
            os.killpg(worker.proc.pid, signal.SIGCONT)
        finally:
            conn.close()
    raise AssertionError("the worker held the SQLite write lock at every try")


def _runs(prefix: str, n: str) -> list[tuple[float, float]]:
    """(start, end) of each execution of job ``n`` that ran to its end."""
    starts = {e["execution"]: e["t"] for e in events(prefix, "start") if e["n"] == n}
    return [(starts[e["execution"]], e["t"]) for e in events(prefix, "end") if e["n"] == n]


@pools("prefork", "solo", "threads")
def test_a_late_retry_from_a_worker_whose_lease_was_recovered_changes_nothing(
        client: Any, start_worker: Callable[..., Worker], prefix: str, view: Backend,
        pool: str) -> None:
    inspect = inspector_for(view)
    task = client.tasks["proj.x_one_at_a_time"]
    a = task.delay("A", 6.0, 6.0)
    frozen = start_worker(pool=pool, env=VT)
    wait_until(lambda: events(prefix, "start"), timeout=30, message="A's first execution")
    b = task.delay("B", 0.0, 0.5)
    assert (inspect.job(b.id) or {}).get("st") in ("enqueued", "blocked")
    _freeze(frozen, view)
    try:
        start_worker(pool=pool, env=VT)
        wait_until(lambda: any(e["n"] == "A" and e["execution"] == 2
                               for e in events(prefix, "start")),
                   timeout=40, message="A recovered and running on the other worker")
    finally:
        os.killpg(frozen.proc.pid, signal.SIGCONT)
    # The frozen execution wakes up and retries while the live claim still runs — unless
    # its worker stops it first: a prefork worker that learns a running task's lease is gone
    # terminates that pool process (docs/reliability.md); a solo or threads worker, which
    # cannot stop one task, exits (issue #27: its run went on past its lease), possibly
    # after the stale execution's retry went out: whichever comes first, the fence holds.
    stopped = "stopping task proj.x_one_at_a_time"
    wait_until(lambda: events(prefix, "retrying") or stopped in frozen.log()
               or frozen.proc.poll() is not None, timeout=30,
               message="the late retry, or the stale execution stopped")
    if pool != "prefork":
        assert events(prefix, "retrying") or frozen.proc.wait(timeout=10) in (
            75, -signal.SIGKILL), frozen.log()
    assert (inspect.job(a.id) or {}).get("st") == "running", "the late retry ended the live claim"
    assert inspect.slot_holders("proj.x_one_at_a_time:") == {a.id}
    wait_until(lambda: (inspect.job(b.id) or {}).get("st") == "completed", timeout=60,
               message="B completed")
    wait_until(lambda: (inspect.job(a.id) or {}).get("st") == "completed", timeout=30,
               message="A completed")
    a_runs, b_runs = _runs(prefix, "A"), _runs(prefix, "B")
    assert len(a_runs) == 1 and len(b_runs) == 1, (a_runs, b_runs)
    starts = [e for e in events(prefix, "start") if e["n"] == "A"]
    assert [e["execution"] for e in starts] == [1, 2], "A was scheduled a third time"
    # concurrency=1: B started only once A's live execution had ended.
    assert b_runs[0][0] >= a_runs[0][1], (a_runs, b_runs)
    assert inspect.holds() == {} and inspect.slot_holders("proj.x_one_at_a_time:") == set()
    if pool == "prefork":
        assert frozen.proc.poll() is None, frozen.log()


@pools("prefork", "solo", "threads")
def test_odd_failure_details_are_dead_lettered_and_never_stop_the_worker(
        client: Any, start_worker: Callable[..., Worker], prefix: str, view: Backend,
        pool: str) -> None:
    inspect = inspector_for(view)
    marks = [client.tasks["proj.mark"].s(n) for n in range(30)]
    odd = {"<sur>": "cannot open \\udce9", "<nul>": "cannot open \\x00",
           "name-<sur>-<nul>": "cannot open name-\\udce9-\\x00"}
    failing = {message: client.tasks["proj.fail_with"].delay(message) for message in odd}
    huge = client.tasks["proj.fail_with"].delay("<huge>")
    unprintable = client.tasks["proj.fail_with"].delay("<unprintable>")
    exits = [client.tasks["proj.exit_with"].delay(how) for how in ("exit", "interrupt")]
    results = [m.delay() for m in marks[:15]] + [m.delay() for m in marks[15:]]
    worker = start_worker(pool=pool, concurrency=2)
    wait_until(lambda: len(inspect.ids_in_state("completed")) == 30, timeout=60,
               message="every normal task completed")
    wait_until(lambda: len(inspect.ids_in_state("failed")) == 7, timeout=30,
               message="every odd failure dead-lettered")
    for result in exits:  # its process (or worker) lost each time, as with os._exit
        record = inspect.job(result.id) or {}
        assert (record["reason"], record["dl"]) == ("delivery limit", "2"), record
    for message, result in failing.items():
        record = inspect.job(result.id) or {}
        assert record["reason"] == "task failed" and record["etype"] == "ValueError"
        assert record["emsg"] == odd[message], record["emsg"]
    huge_record = inspect.job(huge.id) or {}
    assert huge_record["emsg"].endswith("characters in all]")
    unprintable_record = inspect.job(unprintable.id) or {}
    assert unprintable_record["etype"] == "tests.deploy.e2e.proj.Unprintable", unprintable_record
    assert unprintable_record["emsg"] == "<Unprintable object: str() and repr() raised>"
    assert sorted(e["n"] for e in events(prefix, "mark")) == list(range(30))
    assert all(inspect.job(r.id)["st"] == "completed" for r in results)  # type: ignore[index]
    assert worker.proc.poll() is None and "Unrecoverable error" not in worker.log()


#: What ``proj.x_outcome`` raises or returns, and how its job must end: a dead letter of that
#: type ("delivery limit": the pool takes it for a lost worker), or completed.
OUTCOMES = {
    "memory": "MemoryError", "recursion": "RecursionError",
    "str-not-text": "tests.deploy.e2e.proj.StrNotText", "unpicklable-exc": "ValueError",
    "unpicklable-args": "celery.utils.serialization.UnpickleableExceptionWrapper",
    "huge-exc": "ValueError", "generator-exit": "GeneratorExit",
    "departure": "tests.deploy.e2e.proj.Departure", "ret-lambda": "kombu.exceptions.EncodeError",
    "ret-object": "kombu.exceptions.EncodeError", "ret-5mb": "completed",
    "ret-surrogate": "completed", "ret-nul": "completed", "ret-bytes": "completed",
}


@pools("prefork", "solo", "threads")
def test_what_a_task_raises_or_returns_never_stops_the_worker(
        client: Any, start_worker: Callable[..., Worker], view: Backend, pool: str) -> None:
    """Issue 11: a worker never exits because of what a task raised or returned, and every
    such job is settled. (A task's MemoryError made Celery's worker exit, and under the
    threads pool left its job running for ever.)"""
    odd = {how: client.tasks["proj.x_outcome"].delay(how) for how in OUTCOMES}
    marks = [client.tasks["proj.mark"].delay(n) for n in range(20)]
    worker = start_worker(pool=pool, concurrency=2)

    def state(result: Any) -> str | None:
        return (inspector_for(view).job(result.id) or {}).get("st")

    wait_until(lambda: worker.proc.poll() is not None
               or all(state(r) in ("completed", "failed") for r in [*odd.values(), *marks]),
               timeout=60, message="every job settled")
    assert worker.proc.poll() is None and "Unrecoverable error" not in worker.log(), (
        worker.log()[-3000:])
    assert all(state(r) == "completed" for r in marks)
    for how, expected in OUTCOMES.items():
        record = inspector_for(view).job(odd[how].id) or {}
        if expected == "completed":
            assert record["st"] == "completed", (how, record)
        elif record.get("reason") == "delivery limit":  # solo, threads: a lost worker
            assert pool != "prefork", (how, record)
            assert record["emsg"].startswith(expected.rpartition(".")[2] + "("), (how, record)
        else:
            assert (record["st"], record["reason"], record["etype"]) == (
                "failed", "task failed", expected), (how, record)


@pytest.mark.parametrize("how", ["replace", "retry"])
def test_a_job_continued_under_another_key_leaves_no_key_held(
        client: Any, start_worker: Callable[..., Worker], prefix: str, view: Backend,
        how: str) -> None:
    inspect = inspector_for(view)
    start_worker(pool="prefork", concurrency=2)
    result = client.tasks["proj.x_key_changer"].delay("k", how)
    wait_until(lambda: (inspect.job(result.id) or {}).get("st") == "completed", timeout=40,
               message="the continued job completed")
    assert inspect.holds() == {}
    # The first key is free again: a new job of it is accepted and runs.
    again = client.tasks["proj.x_key_changer"].delay("k", how)
    assert again.deduplicated is False
    wait_until(lambda: (inspect.job(again.id) or {}).get("st") == "completed", timeout=40,
               message="the second job completed")
    assert inspect.holds() == {}


BACKSTOP = {"PLUS_TEST_BACKSTOP": "1.5", "PLUS_TEST_VT": "2"}


def test_a_unique_job_keeps_its_key_past_the_backstop_while_it_waits_and_runs(
        prefix: str, broker_url: str, start_worker: Callable[..., Worker], view: Backend,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from .proj import make_app

    monkeypatch.setenv("PLUS_TEST_BACKSTOP", BACKSTOP["PLUS_TEST_BACKSTOP"])
    client = make_app(prefix)
    try:
        task = client.tasks["proj.unique_running"]
        # The worker first: its maintenance renews the key, and a worker still starting 1.5 s
        # after the publish (at load 12-17 here) let the backstop lapse before it was up.
        start_worker(pool="prefork", env=BACKSTOP)
        first = task.apply_async(("k", 4.0), countdown=3.0)
        published = view.now_ms()
        # Scheduled past the backstop: the key is still held.
        wait_until(lambda: view.now_ms() > published + 2_000, timeout=10, message="time")
        dup = task.apply_async(("k", 4.0))
        assert dup.deduplicated and dup.id == first.id
        # Running past the backstop: still held (maintenance renews it).
        wait_until(lambda: events(prefix, "start"), timeout=20, message="the job started")
        started = view.now_ms()
        wait_until(lambda: view.now_ms() > started + 2_500, timeout=10, message="time")
        dup = task.apply_async(("k", 4.0))
        assert dup.deduplicated and dup.id == first.id
        wait_until(lambda: events(prefix, "end"), timeout=20, message="the job ended")
        wait_until(lambda: inspector_for(view).holds() == {}, timeout=10, message="key released")
        assert len(events(prefix, "start")) == 1
    finally:
        client.close()


def test_a_publish_of_a_running_tasks_id_from_outside_changes_nothing(
        client: Any, start_worker: Callable[..., Worker], prefix: str, view: Backend) -> None:
    """``apply_async(task_id=<running id>)`` is fenced: the caller gets that job's result
    (``.deduplicated``), the running job keeps its claim and runs once, nothing is queued."""
    inspect = inspector_for(view)
    start_worker(pool="prefork", concurrency=2)
    task = client.tasks["proj.sleep_mark"]
    running = task.delay(1, 2.0)
    wait_until(lambda: events(prefix, "start"), timeout=30, message="the job started")
    before = inspect.job(running.id) or {}
    again = task.apply_async((2, 0.1), task_id=running.id)
    assert again.id == running.id and again.deduplicated is True
    after = inspect.job(running.id) or {}
    assert (after["st"], after["tok"], after["msg"]) == ("running", before["tok"], before["msg"])
    assert running.get(timeout=30) == 1
    assert [e["n"] for e in events(prefix, "start")] == [1]
    assert inspect.ids_in_state("enqueued") == [] and inspect.ids_in_state("scheduled") == []


ODD_VALUES = ["a\x1fb", "\x06\x16", "x:y", "{tag}", "} {", "caf\udce9", "", "é" * 10]


def test_multi_field_unique_keys_of_any_text_publish_run_and_deduplicate(
        client: Any, start_worker: Callable[..., Worker], prefix: str, view: Backend) -> None:
    """``unique_by`` with two and three fields, values holding every separator the scripts
    use, lone surrogates and a megabyte: each job is one key, published, deduplicated, run."""
    two, three = client.tasks["proj.x_two_fields"], client.tasks["proj.x_three_fields"]
    calls = [(two, (v, i)) for i, v in enumerate(ODD_VALUES)]
    calls += [(three, (v, [v], {"k": v})) for v in ODD_VALUES]
    calls += [(two, ("m" * 1_000_000, 1)), (three, ("m" * 1_000_000, 1, 2))]
    first = [task.apply_async(args) for task, args in calls]
    assert all(r.deduplicated is False for r in first)
    dups = [task.apply_async(args) for task, args in calls]
    assert [d.id for d in dups] == [r.id for r in first] and all(d.deduplicated for d in dups)
    start_worker(pool="prefork", concurrency=2)
    returns = {two.name: 2, three.name: 3}
    assert [r.get(timeout=60) for r in first] == [returns[task.name] for task, _ in calls]
    assert len(events(prefix, "fields")) == len(calls)
    wait_until(lambda: inspector_for(view).holds() == {}, timeout=20, message="every key released")


@pools("prefork", "solo")
def test_an_early_acked_task_still_retries(
        client: Any, start_worker: Callable[..., Worker], prefix: str, view: Backend,
        pool: str) -> None:
    """``acks_late=False``: the delivery's ack finished the job before the task retried, so
    its retry (carrying that delivery's token) is published anew, not fenced."""
    inspect = inspector_for(view)
    start_worker(pool=pool, concurrency=2)
    results = [client.tasks["proj.x_early_retry"].delay(n) for n in range(3)]
    assert [r.get(timeout=40) for r in results] == [0, 1, 2]
    attempts = sorted((e["n"], e["retries"]) for e in events(prefix, "early"))
    assert attempts == [(n, r) for n in range(3) for r in (0, 1)]
    wait_until(lambda: all((inspect.job(r.id) or {}).get("st") == "completed" for r in results),
               timeout=20, message="every job completed")
