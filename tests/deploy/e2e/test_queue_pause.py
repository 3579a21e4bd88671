"""Issue #28's acceptance: a queue paused during a drain by two real ``celery-plus worker``
processes (docs/admin.md, "Pausing a queue").

The workers drain ``drain`` (:mod:`tests.deploy.e2e.pause_proj`: each run appends its task
id, start and end to a Redis list, the external ledger). Once a share of the jobs ran, the
admin pauses the queue and the test keeps the pause's acknowledgement (the store's time of the
step). Then: the jobs claimed before it finish and nothing else runs — every job the ledger
holds was claimed (its record's ``started_ms``, store clock) before the acknowledgement, and
the ledger does not grow while the queue stays paused; the rest wait, enqueued. After the
resume the rest drain: 0 lost (every published id in the ledger), 0 run twice (each once).

The 300-job variant runs in the README's suite (one store, ``tests/deploy/matrix.py``); the
10,000-job one is ``long`` (every store: ``tests/run_long.sh``).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import redis

from celery_plus import admin
from celery_plus.model.store import Backend
from tests.deploy.e2e import pause_proj
from tests.deploy.e2e.conftest import Worker
from tests.deploy.e2e.proj import REDIS_URL
from tests.support import wait_until

QUEUE = pause_proj.QUEUE
#: How long the queue stays paused once the claims made before the pause are done: the
#: window in which the ledger must not grow.
HOLD_S = 1.0
#: Jobs a solo worker of concurrency 1 claims ahead (Celery's worker_prefetch_multiplier, 4).
PREFETCH_WINDOW = 4


@dataclass
class Drain:
    published: int
    before_pause: int
    paused_left: int
    acknowledged_ms: int
    resume_to_first_start_s: float
    total_s: float


def ledger(prefix: str) -> list[list[Any]]:
    client = redis.Redis.from_url(REDIS_URL)
    try:
        return [json.loads(raw) for raw in client.lrange(pause_proj.ledger_key(prefix), 0, -1)]
    finally:
        client.close()


def _claimed(counts: admin.Counts) -> int:
    """Jobs claimed by a worker: running, or reserved (prefetched, not started)."""
    return counts.running + counts.reserved


def ledger_size(prefix: str) -> int:
    client = redis.Redis.from_url(REDIS_URL)
    try:
        return int(client.llen(pause_proj.ledger_key(prefix)))
    finally:
        client.close()


def drain_with_a_pause(prefix: str, view: Backend, start_worker: Callable[..., Worker],
                       jobs: int, seconds: float, pause_after: int, timeout: float) -> Drain:
    client = pause_proj.make_app(prefix)
    began = time.monotonic()
    published: list[str] = []
    for first in range(0, jobs, 1000):
        with client.publish_batch():
            published += [client.send_task("pause.run", (n, seconds)).id
                          for n in range(first, min(first + 1000, jobs))]
    workers = [start_worker("-Q", QUEUE, app="tests.deploy.e2e.pause_proj", ready=False)
               for _ in range(2)]
    for worker in workers:
        wait_until(lambda: " ready." in worker.log() or worker.proc.poll() is not None,  # noqa: B023
                   timeout=60, message="worker ready")
        assert worker.proc.poll() is None, worker.log()

    wait_until(lambda: ledger_size(prefix) >= pause_after, timeout=timeout,
               message=f"{pause_after} jobs run")
    with admin.connect(client) as operator:
        acknowledged = operator.pause_queue(QUEUE).acknowledged_ms
        # The claims made before the pause run to their end and are settled.
        wait_until(lambda: _claimed(operator.counts()) == 0, timeout=60,
                   message="the claims made before the pause settled")
        before = ledger(prefix)
        left = operator.counts().enqueued
        assert left == jobs - len(before) > 0, "the pause came after the drain"
        time.sleep(HOLD_S)  # the paused window itself (the observation, not a wait for it)
        assert ledger_size(prefix) == len(before), "a job ran while the queue was paused"
        assert operator.counts().enqueued == left
        records = [rec for job_id, *_ in before if (rec := view.record(job_id)) is not None]
        # A record's started_ms is its claim's time unless the worker's start mark moved it
        # to the task's real start (start_mark == lease_token): those may start after the
        # pause, having been claimed before it, at most one prefetch window per worker.
        late = [(rec.id, rec.started_ms) for rec in records
                if rec.started_ms >= acknowledged and rec.start_mark != rec.lease_token]
        assert late == [], f"claimed after the pause was acknowledged ({acknowledged})"
        prefetched = [rec.id for rec in records
                      if rec.started_ms >= acknowledged and rec.start_mark == rec.lease_token]
        assert len(prefetched) <= len(workers) * PREFETCH_WINDOW, prefetched
        resumed_at = time.time()
        resumed = operator.resume_queue(QUEUE)
        assert not resumed.paused

    wait_until(lambda: ledger_size(prefix) >= jobs, timeout=timeout, interval=0.2,
               message="the rest drained after the resume")
    wait_until(lambda: _claimed(admin.counts(client)) == 0, timeout=60, message="all settled")
    runs = ledger(prefix)
    counted = Counter(job_id for job_id, *_ in runs)
    assert [job_id for job_id, n in counted.items() if n > 1] == [], "run twice"
    assert set(counted) == set(published), f"lost: {len(set(published) - set(counted))}"
    after = runs[len(before):]
    claimed_at = [view.record(job_id) for job_id, *_ in after]
    assert after and all(rec is not None and rec.started_ms >= resumed.acknowledged_ms
                         for rec in claimed_at)
    first_start = min(start for _, start, _, _ in after) - resumed_at
    client.close()
    return Drain(jobs, len(before), left, acknowledged, first_start, time.monotonic() - began)


@pytest.mark.parametrize(("jobs", "seconds", "pause_after", "timeout"), [
    pytest.param(300, 0.01, 60, 60, id="300"),
    pytest.param(10_000, 0.0, 3000, 600, id="10000", marks=pytest.mark.long)])
def test_a_paused_queue_hands_out_nothing_and_drains_after_the_resume(
        broker_kind: str, prefix: str, view: Backend, start_worker: Callable[..., Worker],
        jobs: int, seconds: float, pause_after: int, timeout: float) -> None:
    got = drain_with_a_pause(prefix, view, start_worker, jobs, seconds, pause_after, timeout)
    assert got.resume_to_first_start_s < 5, got
    print(f"\n{broker_kind}: {got}")
