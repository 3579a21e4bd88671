"""A task's ``self.retry()`` published into a store outage: the job is kept, never lost.

Celery rejects a delivery for good when its retry's publish raises (``Reject(requeue=False)``,
a dead letter ``rejected`` on celery-plus); a publish that met an outage gives the delivery
back instead (``celery_plus/send/unpublished_retry.py``). Two jobs run on a worker of a
private Redis; Redis is killed (AOF), the jobs ask for their retry while it is down (the
publish fails: connection refused), Redis comes back: each job runs its first attempt again
(its history says ``retry not published``), publishes its retry, and the retry runs. A third
job fails in the same outage: a dead letter with its reason (``task failed``), although the
worker's connection closed and reopened meanwhile. By the ledger: nothing lost, three runs
a retrying job, none overlapping.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable

import pytest

from celery_plus.send.unpublished_retry import REASON
from tests.support import wait_until

from .harness import RETRIED, Deployment, check

#: The lease: long enough that the runs keep their claims while the retry's publish waits
#: out the store's connect bound (about 6 s refused) and fails, so Celery's rejection (the
#: path that lost jobs), not the lease watch, ends each delivery. A restarted Redis then
#: claims nothing for one lease (docs/reliability.md, "A Redis rewind"): hence ``long``.
LEASE_S = 20.0


@pytest.mark.long
def test_a_retry_published_into_a_store_outage_keeps_its_job(
        deploy: Callable[..., Deployment]) -> None:
    deployment = deploy("retry into an outage", "redis", vt=LEASE_S)
    worker = deployment.start_worker(concurrency=3)
    marker = deployment.folder / "now"
    # Three runs: the first (its retry not published), the same attempt again, the retry.
    ids = [deployment.publish("fault.retry_when", f"w{n}", str(marker), 30.0, runs=3)
           for n in range(2)]
    # A failure in the same outage is a dead letter with its reason, not a success.
    failing = deployment.publish("fault.fail_when", "f", str(marker), 30.0, dead=True)
    deployment.wait_running(3)
    deployment.server.crash()  # type: ignore[attr-defined]
    marker.touch()
    # Each run asked for its retry and the worker settled what the publish raised (Celery's
    # rejection, or the give-back) before the store comes back.
    settled = [re.compile(rf"fault\.\w+_when\[{i}\](?! received)") for i in [*ids, failing]]
    wait_until(lambda: all(p.search(worker.log()) for p in settled), timeout=30,
               message="the retries and the failure met the outage")
    deployment.server.start()  # type: ignore[attr-defined]
    deployment.fault_ended = time.time()
    report = deployment.finish("two retries published while Redis was down",
                               timeout=LEASE_S + 60)
    check(report, allow_twice=(RETRIED,))
    assert deployment.overlapping_runs() == []
    for job_id in ids:
        history = json.loads((deployment.inspect.job(job_id) or {}).get("hist") or "[]")
        assert [e.get("outcome") for e in history].count(REASON) == 1, history
    failed = deployment.inspect.job(failing) or {}
    assert (failed.get("reason"), failed.get("emsg")) == ("task failed", "f fails as asked")
    assert "Unrecoverable error" not in worker.log()
