"""The benchmark's app: the same no-op task on plain Celery or on celery-plus.

``BENCH_KIND`` picks ``celery`` (plain Celery on ``redis://``), ``plus`` (celery-plus
on ``plus+redis://``) or ``plus-sqlite`` (celery-plus on ``plus+sqlite://``, a file in
the system's temp folder); ``BENCH_RUN`` isolates each run's queue, keys and file. The
first and the last job write their wall-clock time to Redis, which gives the drain rate.
"""

from __future__ import annotations

import os
import tempfile
import time

import redis

REDIS_URL = os.environ.get("BENCH_REDIS", "redis://127.0.0.1:6379/0")
KIND = os.environ.get("BENCH_KIND", "celery")
RUN = os.environ.get("BENCH_RUN", "bench")
QUEUE = f"{RUN}-q"

if KIND.startswith("plus"):
    from celery_plus import Celery

    if KIND == "plus-sqlite":
        broker = f"plus+sqlite:///{tempfile.gettempdir()}/{RUN}.db"
    else:
        broker = f"plus+{REDIS_URL}"
    app = Celery("bench", broker=broker, backend=None, set_as_current=False)
    app.conf.plus_key_prefix = RUN
else:
    from celery import Celery  # type: ignore[assignment]

    app = Celery("bench", broker=REDIS_URL, set_as_current=False)

app.conf.update(
    task_default_queue=QUEUE,
    task_acks_late=True,
    task_ignore_result=True,
    worker_prefetch_multiplier=4,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)

_marks = redis.Redis.from_url(REDIS_URL)


@app.task(name="bench.noop")
def noop(i: int, n: int) -> None:
    if i == 0 or i == n - 1:
        _marks.set(f"{RUN}:mark:{i}", repr(time.time()))
