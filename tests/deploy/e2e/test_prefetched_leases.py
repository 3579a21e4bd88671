"""Issue 11, defect 11: every claim a worker holds is renewed, delivered or not.

A solo worker claims a batch of jobs (its prefetch window) and runs them one after another
inside the delivery loop: the later claims of the batch wait in the worker, not yet handed
to Celery. Their leases must be renewed all the same, or they expire, are recovered and run
a second time on a perfectly healthy worker. The issue's figures were a 10 s lease with
four 6 s jobs (two of four ran twice); here a 3 s lease with four 1.8 s jobs keeps the ratio.
Runs on each durable store (``broker_kind``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

from celery_plus.model.store import Backend
from tests.deploy.matrix import pools
from tests.inspectors import inspector_for

from .conftest import Worker, wait_until
from .proj import events

VT_S = 3.0
JOB_S = 0.6 * VT_S
JOBS = 4


@pools("solo", "threads")
def test_a_healthy_worker_never_runs_its_prefetched_jobs_twice(
    client: Any, start_worker: Callable[..., Worker], prefix: str, view: Backend, pool: str
) -> None:
    ids = [client.tasks["proj.sleep_mark"].delay(n, JOB_S).id for n in range(JOBS)]
    # One worker, one slot: the first claim takes the whole prefetch window (4 jobs).
    worker = start_worker(pool=pool, concurrency=1, env={"PLUS_TEST_VT": str(VT_S)})

    def all_completed() -> bool:
        return all((inspector_for(view).job(i) or {}).get("st") == "completed" for i in ids)

    wait_until(all_completed, timeout=JOBS * JOB_S + 60, message="every job completed")
    # A recovered job would be claimed and run once more after the batch: give it the time.
    wait_until(lambda: view.stats().get("recovered", 0) > 0 or len(events(prefix, "end")) >= JOBS,
               timeout=10, message="every run ended")
    runs = Counter(e["n"] for e in events(prefix, "start"))
    assert runs == dict.fromkeys(range(JOBS), 1), (runs, worker.log()[-3000:])
    assert view.stats().get("recovered", 0) == 0
    for job_id in ids:
        record = inspector_for(view).job(job_id) or {}
        assert record.get("dl") == "1", record  # delivered once, never taken over
    assert "consuming on Celery's event loop" in worker.log()  # the loop under test
    assert "recovered job" not in worker.log()
    assert "lease of job" not in worker.log()
