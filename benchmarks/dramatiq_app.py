"""The outside reference: the benchmarks' ``counted`` task as a Dramatiq actor on the same Redis.

``BENCH_RUN`` isolates the run (Dramatiq's namespace and the queue). Run with
``dramatiq benchmarks.dramatiq_app --processes 1 --threads 8``; needs the ``bench`` extra.
"""

from __future__ import annotations

import os

import dramatiq
import redis
from dramatiq.brokers.redis import RedisBroker

from benchmarks.marks import count_done

REDIS_URL = os.environ.get("BENCH_REDIS", "redis://127.0.0.1:6379/0")
RUN = os.environ.get("BENCH_RUN", "bench")

broker = RedisBroker(url=REDIS_URL, namespace=f"{RUN}-dramatiq")
dramatiq.set_broker(broker)
_marks = redis.Redis.from_url(os.environ.get("BENCH_MARKS", REDIS_URL))


@dramatiq.actor(queue_name=f"{RUN}-q", max_retries=0)
def counted(i: int, n: int, sleep_s: float = 0.0) -> None:
    count_done(_marks, RUN, n, sleep_s)


def send(i: int, n: int) -> None:
    """Enqueue one job (Dramatiq has no batch enqueue)."""
    counted.send(i, n)
