"""Store-level rates on a Redis Cluster store against one Redis server (docs/redis-cluster.md).

    python -m benchmarks.cluster_store [jobs]

Starts a local cluster (3 primaries, 3 replicas, ports 7190-7195; tests/redis_cluster.py) and
measures, in one process and thread: publishes per second to 6 queues (one by one), then
claims + acks per second (batches of 50, settles sent with the next claim), for
``plus+redis://`` (the shared server on 6379, its own key prefix, deleted after),
``plus+redis+cluster://`` and the cluster with ``plus_redis_wait_replicas=1``.
"""

from __future__ import annotations

import sys
import tempfile
import time
import uuid
from pathlib import Path

import redis

from celery_plus.model.options import StoreOptions
from celery_plus.model.store import Backend, NewJob, Settle
from celery_plus.stores.redis.backend import RedisBackend
from celery_plus.stores.redis.cluster import RedisClusterBackend
from tests.redis_cluster import local_cluster

QUEUES = [f"q{i}" for i in range(6)]
MESSAGE = "x" * 400


def rates(backend: Backend, jobs: int) -> tuple[float, float]:
    """(publishes/s, claims+acks/s) of ``jobs`` jobs."""
    started = time.perf_counter()
    for n in range(jobs):
        backend.publish(NewJob(id=f"j{n}", queue=QUEUES[n % len(QUEUES)], message=MESSAGE))
    published = time.perf_counter() - started
    started, done, settles = time.perf_counter(), 0, []
    while done < jobs:
        result = backend.claim(QUEUES, "bench", 50, settles)
        settles = [Settle(c.job_id, c.token, "ack") for c in result.claims]
        done += len(result.claims)
    backend.settle(settles)
    return jobs / published, jobs / (time.perf_counter() - started)


def show(label: str, backend: Backend, jobs: int) -> None:
    published, drained = rates(backend, jobs)
    print(f"{label:<26} publish {published:.0f}/s  claim+ack {drained:.0f}/s")


def main(jobs: int) -> None:
    prefix = f"bench{uuid.uuid4().hex[:6]}"
    single = RedisBackend("redis://127.0.0.1:6379/0", StoreOptions(prefix=prefix))
    try:
        show("plus+redis://", single, jobs)
    finally:
        single.close()
        client = redis.Redis()
        for key in list(client.scan_iter(f"{prefix}:*", count=1000)):
            client.delete(key)
    with tempfile.TemporaryDirectory() as tmp, local_cluster(Path(tmp), 7190) as cluster:
        url = cluster.url.removeprefix("plus+")
        for wait in (0, 1):
            backend = RedisClusterBackend(url, StoreOptions(prefix=f"{prefix}w{wait}",
                                                            wait_replicas=wait))
            show(f"cluster, wait_replicas={wait}", backend, jobs)
            backend.close()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5000)
