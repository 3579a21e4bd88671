"""Acceptance line 5 of the foundation issue: leases on live workers.

"A job running 3x plus_visibility_timeout on a live worker runs exactly once. countdown jobs
longer than the visibility timeout run exactly once."

Both tests run two workers with a 2 s visibility timeout, so a missed heartbeat would let the
idle worker recover the job and run it a second time. Runs on each durable store
(``broker_kind``: Redis, SQLite and PostgreSQL).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from celery_plus.model.store import Backend
from tests.inspectors import inspector_for

from .conftest import Worker, wait_until
from .proj import events

VT_S = 2.0
VT = {"PLUS_TEST_VT": str(VT_S)}


def test_long_job_on_a_live_worker_runs_exactly_once(
    client: Any, start_worker: Callable[..., Worker], prefix: str, view: Backend
) -> None:
    inspect = inspector_for(view)
    workers = [start_worker(env=VT), start_worker(env=VT)]
    seconds = 3 * VT_S
    result = client.tasks["proj.sleep_mark"].delay(1, seconds)

    wait_until(lambda: events(prefix, "start"), timeout=20, message="job start")
    # While it runs past several lease lengths, the lease keeps being renewed.
    deadlines: list[int] = []

    def finished() -> bool:
        deadline = inspect.lease_deadline(result.id)
        if deadline is not None:
            deadlines.append(deadline)
        return bool(events(prefix, "end"))

    wait_until(finished, timeout=seconds + 20, message="job end")
    starts, ends = events(prefix, "start"), events(prefix, "end")
    assert len(starts) == 1, starts
    assert len(ends) == 1, ends
    assert result.get(timeout=10) == 1
    wait_until(lambda: (inspect.job(result.id) or {}).get("st") == "completed", timeout=10,
               message="job completed")

    assert ends[0]["t"] - starts[0]["t"] >= seconds * 0.95
    record = inspect.job(result.id) or {}
    assert record["tok"] == "1", record  # claimed once: never handed over
    assert record["dl"] == "1", record
    assert len(set(deadlines)) >= 2, "the lease was never renewed"
    assert view.stats().get("recovered", 0) == 0
    for worker in workers:
        assert worker.proc.poll() is None
        assert "recovered job" not in worker.log()
        assert "lease of job" not in worker.log()


def test_countdown_longer_than_visibility_timeout_runs_exactly_once(
    client: Any, start_worker: Callable[..., Worker], prefix: str, view: Backend
) -> None:
    inspect = inspector_for(view)
    workers = [start_worker(env=VT), start_worker(env=VT)]
    countdown = 5.0
    published_at = time.time()
    result = client.tasks["proj.mark"].apply_async(args=(5,), countdown=countdown)
    stored = inspect.job(result.id) or {}
    assert stored.get("st") == "scheduled", stored
    assert int(stored["due"]) >= int((published_at + countdown) * 1000) - 100, stored

    # While it waits, the job is scheduled in the store and held by no worker.
    samples: list[str] = []

    def marked() -> bool:
        if events(prefix, "mark"):
            return True
        if time.time() < published_at + countdown - 1.0:
            record = inspect.job(result.id) or {}
            samples.append(record.get("st", ""))
            assert record.get("st") == "scheduled", record
            assert inspect.lease_deadline(result.id) is None
            assert not record.get("wk"), record
            assert result.id in inspect.ids_in_state("scheduled")
        return False

    wait_until(marked, timeout=countdown + 25, interval=0.1, message="mark event")
    assert len(samples) >= 5, samples
    assert result.get(timeout=10) == 5
    wait_until(lambda: (inspect.job(result.id) or {}).get("st") == "completed", timeout=10,
               message="job completed")

    marks = events(prefix, "mark")
    assert len(marks) == 1, marks
    assert marks[0]["t"] - published_at >= countdown - 0.5, marks[0]["t"] - published_at
    record = inspect.job(result.id) or {}
    assert record["tok"] == "1", record
    assert record["dl"] == "1", record
    assert view.stats().get("recovered", 0) == 0
    for worker in workers:
        assert worker.proc.poll() is None


def test_an_early_acked_job_runs_to_its_end_in_a_prefork_pool_past_the_lease(
    client: Any, start_worker: Callable[..., Worker], prefix: str, view: Backend
) -> None:
    """``acks_late=False``: the job is finished in the store as it is received, so the pool
    process that runs it has no lease to renew: it must not take the finished claim for a
    lost lease and stop its task (it did: ``thaw_guard``'s renewal)."""
    worker = start_worker(pool="prefork", concurrency=1, env=VT)
    seconds = 2 * VT_S + 5.0 + 1.0  # past the lease, a renewal and a lost lease's wait
    result = client.tasks["proj.x_early_long"].delay(seconds)
    assert result.get(timeout=seconds + 30) == seconds
    assert len(events(prefix, "early_long")) == 1
    assert "lost its lease" not in worker.log(), worker.log()


def test_a_task_that_retries_without_raising_runs_on_to_its_end(
    client: Any, start_worker: Callable[..., Worker], prefix: str, view: Backend
) -> None:
    """``self.retry(countdown=60, throw=False)`` then more work: the retry's message ends the
    claim in the store (the job waits for its countdown), and the run that sent it goes on, as
    in Celery: neither the worker's keeper nor the pool process's renewal takes the claim its
    own task continued for a lost lease and stops the run."""
    worker = start_worker(pool="prefork", concurrency=1, env=VT)
    seconds = 2 * VT_S + 5.0 + 1.0  # past the lease, a renewal and a lost lease's wait
    result = client.tasks["proj.x_retry_and_go_on"].delay(seconds)
    wait_until(lambda: len(events(prefix, "go_on")) == 2, timeout=seconds + 30,
               message="the run that retried reaches its end")
    assert [e["at"] for e in events(prefix, "go_on")] == ["start", "end"]
    record = view.record(result.id)
    assert record is not None and record.state == "scheduled", record
    log = worker.log()
    assert "lost its lease" not in log and "was lost" not in log, log
