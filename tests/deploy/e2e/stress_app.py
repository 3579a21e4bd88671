"""The app of the SQLite stress test: fast tasks with uniqueness and concurrency keys.

Each run counts itself in Redis (``{prefix}:runs``, a hash of task id → executions), so
the test can tell exactly-once from at-least-once.
"""

from __future__ import annotations

import os

import redis

from celery_plus import Celery

PREFIX = os.environ.get("PLUS_TEST_PREFIX", "stress")
BROKER = os.environ.get("PLUS_TEST_BROKER", "plus+sqlite:///stress.db")
REDIS_URL = os.environ.get("PLUS_TEST_REDIS", "redis://127.0.0.1:6379/0")

app = Celery("stress", broker=BROKER, backend=None, set_as_current=False)
app.conf.update(
    plus_visibility_timeout=3.0,
    plus_maintenance_interval=0.25,
    task_ignore_result=True,
    worker_hijack_root_logger=False,
)
_runs = redis.Redis.from_url(REDIS_URL)


def _count() -> None:
    from celery import current_task

    _runs.hincrby(f"{PREFIX}:runs", current_task.request.id, 1)


@app.task(name="stress.work", concurrency=3, concurrency_key="customer")
def work(customer: str, n: int) -> None:
    _count()


@app.task(name="stress.dedup", unique_by=["key"], unique_window="pending")
def dedup(key: str, n: int) -> None:
    _count()
