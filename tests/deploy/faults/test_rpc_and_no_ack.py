"""The ``rpc://`` result backend, and no-ack consumers, on every store.

``rpc://`` (issue 11, defect 5): Celery's RPC backend
publishes each result to the caller's reply queue with the task id as correlation id; a
result must never be taken for a job of its own task. Unique jobs called one after another
with ``.get()`` each run once and leave no hold behind, and the same call made again after
the first finished runs again (it is not "deduplicated" into a finished job).

No-ack consumers (defect 9): jobs a ``SimpleQueue(no_ack=True)`` takes are completed as
they are delivered, never redelivered nor dead-lettered as "delivery limit".
"""

from __future__ import annotations

import time
from collections.abc import Callable

import kombu
import pytest

from tests.inspectors import inspector_for
from tests.support import wait_until

from .harness import MAINTENANCE_S, Deployment, check

STORES = ["redis", "postgres", "sqlite"]


@pytest.mark.parametrize("store", STORES)
def test_rpc_results_of_unique_jobs(deploy: Callable[..., Deployment], store: str) -> None:
    deployment = deploy("rpc results", store, vt=3.0, results="rpc://")
    deployment.start_worker(concurrency=2)
    look = inspector_for(deployment.view)
    for n in range(3):
        result = deployment.app.send_task("fault.unique", (f"u{n}", 0.1))
        deployment.jobs[f"u{n}"] = result.id
        assert result.get(timeout=30) == f"u{n}"
        # The result reaches the caller just before the late ack reaches the store: the
        # same call made before that joins the still-running job, as the running window
        # says. Once the job has finished, the call must run anew.
        job_id = result.id
        wait_until(lambda job_id=job_id: (look.job(job_id) or {}).get("st") == "completed",
                   timeout=30, message=f"u{n} completed in the store")
        again = deployment.app.send_task("fault.unique", (f"u{n}", 0.1))
        assert not again.deduplicated, f"u{n} was deduplicated into a finished job"
        deployment.jobs[f"u{n}-again"] = again.id
        assert again.get(timeout=30) == f"u{n}"
    report = deployment.finish("3 unique jobs called twice each with .get()", timeout=30)
    check(report)


@pytest.mark.parametrize("store", STORES)
def test_no_ack_consumers_complete_what_they_take(deploy: Callable[..., Deployment],
                                                  store: str) -> None:
    deployment = deploy("no-ack consumer", store, vt=1.0)
    ids = [deployment.publish("fault.work", f"w{n}", 0.0) for n in range(10)]
    with kombu.Connection(deployment.broker, transport_options={
            "plus_key_prefix": deployment.prefix, "plus_pg_schema": deployment.prefix,
            "plus_visibility_timeout": deployment.vt,
            "plus_maintenance_interval": MAINTENANCE_S}) as conn:
        queue = conn.SimpleQueue("faults", no_ack=True)
        taken = [queue.get(timeout=10).headers["id"] for _ in ids]
        assert sorted(taken) == sorted(ids)
        time.sleep(3 * deployment.vt)  # a claim left running would be recovered by now
        with pytest.raises(queue.Empty):
            queue.get(timeout=0.5)
        queue.close()
    states = {(inspector_for(deployment.view).job(i) or {}).get("st") for i in ids}
    assert states == {"completed"}, states
    assert deployment.view.stats().get("recovered", 0) == 0
