"""Huey on Redis with the benchmarks' ``counted`` task; ``BENCH_RUN`` names its keys.

Results are off (as Celery's ``task_ignore_result``). Huey's Redis storage pops a message with
``BRPOP`` and keeps no copy while it runs: at most once. Run with
``huey_consumer benchmarks.peers.huey_app.huey -w 1 -k thread``.
"""

from __future__ import annotations

import os

import redis
from huey import RedisHuey

from benchmarks.marks import count_done

REDIS_URL = os.environ.get("BENCH_REDIS", "redis://127.0.0.1:6379/0")
RUN = os.environ.get("BENCH_RUN", "bench")

huey = RedisHuey(f"{RUN}-huey", url=REDIS_URL, results=False)
_marks = redis.Redis.from_url(os.environ.get("BENCH_MARKS", REDIS_URL))


@huey.task(name="counted")
def counted(i: int, n: int, sleep_s: float = 0.0) -> None:
    count_done(_marks, RUN, n, sleep_s)


def send(i: int, n: int) -> None:
    """Enqueue one job (Huey has no batch enqueue)."""
    counted(i, n)
