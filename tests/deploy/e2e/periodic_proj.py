"""The project of the schedule and rate-limit tests (e2e, browser, and the long runs in
``tests/deploy/faults/``): :mod:`tests.deploy.e2e.proj`'s app with a beat schedule and
rate-limited tasks.

Read from the environment: ``PLUS_TEST_PREFIX`` (key prefix), ``PLUS_TEST_BEAT_EVERY``
(seconds between ticks of the entry ``tick``, default 1), ``PLUS_TEST_BEAT_LEASE`` (beat's
lease, default 2 s), ``PLUS_TEST_RATE`` (the cluster rate limit, default ``5/s``),
``PLUS_TEST_PREFETCH`` (``worker_prefetch_multiplier``, default Celery's 4). Every task
records its start in Redis (``{prefix}:events``, :func:`tests.deploy.e2e.proj.record`).
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from typing import Any

from tests.deploy.e2e.proj import make_app, record

PREFIX = os.environ.get("PLUS_TEST_PREFIX", "plus-e2e")
EVERY = float(os.environ.get("PLUS_TEST_BEAT_EVERY", "1"))
RATE = os.environ.get("PLUS_TEST_RATE", "5/s")

app = make_app(
    PREFIX,
    plus_beat_lease=float(os.environ.get("PLUS_TEST_BEAT_LEASE", "2")),
    worker_prefetch_multiplier=int(os.environ.get("PLUS_TEST_PREFETCH", "4")),
    beat_schedule={"tick": {"task": "periodic.tick", "schedule": timedelta(seconds=EVERY)}},
)


@app.task(name="periodic.tick", bind=True)
def tick(self: Any) -> None:
    beat = self.request.get("plus_beat") or {}
    record(PREFIX, "tick", id=self.request.id, entry=beat.get("entry"), due_ms=beat.get("due_ms"))


@app.task(name="periodic.limited", rate_limit=RATE, rate_limit_scope="cluster")
def limited(n: int, seconds: float = 0.0) -> None:
    record(PREFIX, "limited", n=n)
    time.sleep(seconds)


@app.task(name="periodic.per_minute", rate_limit="3/m", rate_limit_scope="cluster")
def per_minute(n: int) -> None:
    record(PREFIX, "per_minute", n=n)


@app.task(name="periodic.per_worker", rate_limit="2/s")
def per_worker(n: int) -> None:
    record(PREFIX, "per_worker", n=n)


@app.task(name="periodic.retried", bind=True, rate_limit=RATE, rate_limit_scope="cluster",
          max_retries=1)
def retried(self: Any, n: int) -> None:
    """Starts twice: fails its first start and is retried at once."""
    record(PREFIX, "retried", n=n, attempt=self.request.retries)
    if self.request.retries == 0:
        raise self.retry(countdown=0)


@app.task(name="periodic.both", rate_limit=RATE, rate_limit_scope="cluster", concurrency=2)
def both(n: int, seconds: float) -> None:
    record(PREFIX, "both", n=n, edge="start")
    time.sleep(seconds)
    record(PREFIX, "both", n=n, edge="end")


@app.task(name="periodic.per_key", rate_limit=RATE, rate_limit_key="key")
def per_key(key: str, n: int, seconds: float = 0.0) -> None:
    record(PREFIX, "per_key", key=key, n=n)
    time.sleep(seconds)


@app.task(name="periodic.free")
def free(n: int, seconds: float = 0.0) -> None:
    record(PREFIX, "free", n=n)
    time.sleep(seconds)
