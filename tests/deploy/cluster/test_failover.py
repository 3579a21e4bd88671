"""A primary of a local Redis Cluster killed (``kill -9``) while a worker drains: with
``plus_redis_wait_replicas=1`` no acknowledged publish is lost; without it, what is lost is
counted (docs/redis-cluster.md has the figures of the runs).

Behind ``PLUS_REDIS_CLUSTER_FULL=1`` (tests/deploy/cluster/run.sh): about a minute of wall time.

The publisher publishes ``JOBS`` jobs over ``QUEUES`` queues (spread over the three
primaries), retrying each until a publish of it returns (acknowledged); the drainer claims
and acks throughout. Once a third of the jobs are acknowledged, the primary of the first
queue's slot is killed; its replica takes over, and the killed node is started again (it
rejoins as a replica, so ``WAIT 1`` can be met again). Lost: an acknowledged job that was
never delivered and has no record after the failover.

``lagging``: the victim's replica is frozen (SIGSTOP) for ``LAG_S`` before the kill and
resumed right after it, as a replica behind on the replication stream (a slow link, a busy
host), with messages of 16 KiB so that what it misses outgrows the kernel's socket buffers:
what the primary acknowledged and still held in its own output buffer is on no other node
when it dies.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

from celery_plus.model.options import StoreOptions
from celery_plus.model.store import NewJob, Settle
from celery_plus.stores.redis.cluster import RedisClusterBackend
from tests.inspectors import inspector_for
from tests.redis_cluster import LocalCluster, local_cluster
from tests.support import wait_until

pytestmark = pytest.mark.skipif(os.environ.get("PLUS_REDIS_CLUSTER_FULL") != "1",
                                reason="the failover run: PLUS_REDIS_CLUSTER_FULL=1")

JOBS = int(os.environ.get("PLUS_FAILOVER_JOBS", "4000"))
QUEUES = [f"q{i}" for i in range(6)]
PORT = 7150
#: The drainer's leases: a claim whose reply the kill swallowed is recovered after this.
LEASE_MS = 2000
LAG_S = float(os.environ.get("PLUS_FAILOVER_LAG_S", "2"))
#: Message size of the lagging runs: enough that what the frozen replica misses outgrows the
#: kernel's socket buffers and stays in the primary's own output buffer.
LAG_MESSAGE_BYTES = int(os.environ.get("PLUS_FAILOVER_LAG_BYTES", "16384"))
ERRORS = (redis.exceptions.RedisError, redis.exceptions.RedisClusterException, OSError)


@dataclass
class Run:
    acknowledged: set[str] = field(default_factory=set)
    delivered: set[str] = field(default_factory=set)
    publish_errors: int = 0
    claim_errors: int = 0
    killed_at_ack: int = 0
    publishing_done: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    with local_cluster(tmp_path / "cluster", PORT, node_timeout_ms=1000) as running:
        yield running


def _backend(cluster: LocalCluster, wait_replicas: int, prefix: str) -> RedisClusterBackend:
    url = cluster.url.removeprefix("plus+")
    return RedisClusterBackend(url, StoreOptions(prefix=prefix, compact_records=True,
                                                 lease_ms=LEASE_MS,
                                                 wait_replicas=wait_replicas,
                                                 wait_timeout_ms=500))


def _publish(backend: RedisClusterBackend, run: Run, size: int) -> None:
    for n in range(JOBS):
        # Random text (a store may deflate envelopes): what the replica misses must be big.
        job = NewJob(id=f"job-{n}", queue=QUEUES[n % len(QUEUES)],
                     message=f"m{n}:{secrets.token_hex(size // 2)}")
        deadline = time.monotonic() + 60
        while True:
            try:
                backend.publish(job)
                break
            except ERRORS:
                run.publish_errors += 1
                assert time.monotonic() < deadline, f"{job.id} never acknowledged"
                time.sleep(0.05)
        with run.lock:
            run.acknowledged.add(job.id)
    run.publishing_done.set()


def _drain(backend: RedisClusterBackend, run: Run, stop: threading.Event) -> None:
    """Claim and ack, and recover expired leases as a worker's maintenance does (a claim
    the primary ran but whose reply the kill lost is a running job until its lease ends)."""
    settles: list[Settle] = []
    recovered_at = time.monotonic()
    while not stop.is_set():
        try:
            if time.monotonic() - recovered_at > 0.5:
                backend.recover()
                recovered_at = time.monotonic()
            result = backend.claim(QUEUES, "drainer", 50, settles)
        except ERRORS:
            run.claim_errors += 1
            time.sleep(0.05)
            continue  # the settles are sent again: a stale one changes nothing
        settles = [Settle(c.job_id, c.token, "ack") for c in result.claims]
        with run.lock:
            run.delivered.update(c.job_id for c in result.claims)
        if not result.claims:
            time.sleep(0.01)


@pytest.mark.parametrize("lagging", [False, True], ids=["in-sync", "lagging"])
@pytest.mark.parametrize("wait_replicas", [1, 0], ids=["wait-1", "wait-off"])
def test_a_primary_killed_mid_drain(cluster: LocalCluster, wait_replicas: int, lagging: bool,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    prefix = f"fo{secrets.token_hex(4)}"
    publisher, drainer = _backend(cluster, wait_replicas, prefix), _backend(cluster, 0, prefix)
    view = _backend(cluster, 0, prefix)
    victim = view.client.get_node_from_key(view.queue(QUEUES[0]).key("q", QUEUES[0])).port
    run, stop = Run(), threading.Event()
    size = LAG_MESSAGE_BYTES if lagging else 16
    threads = [threading.Thread(target=_publish, args=(publisher, run, size)),
               threading.Thread(target=_drain, args=(drainer, run, stop))]
    started = time.monotonic()
    for thread in threads:
        thread.start()
    try:
        wait_until(lambda: len(run.acknowledged) >= JOBS // 3, timeout=120,
                   message="a third of the jobs acknowledged")
        run.killed_at_ack = len(run.acknowledged)
        replica = cluster.replica_of(victim)
        if lagging:
            cluster.freeze(replica, True)
            time.sleep(LAG_S)  # the replica falls behind while publishing goes on
        killed = time.monotonic()
        cluster.kill(victim)
        if lagging:
            cluster.freeze(replica, False)
        wait_until(lambda: victim not in cluster.primaries() and cluster.healthy(),
                   timeout=60, interval=0.1, message="the replica promoted")
        promoted = time.monotonic() - killed
        cluster.restart(victim)  # back as a replica of the promoted node
        wait_until(lambda: cluster.role(victim) == "slave" and cluster.replicas_synced(),
                   timeout=60, interval=0.1, message="the killed node back as a replica")
        wait_until(run.publishing_done.is_set, timeout=180, message="every job acknowledged")
        # A client of its own: one whose slot map predates the failover could ask the killed
        # node, restarted empty, while it still takes itself for the slots' primary.
        view.close()
        view = _backend(cluster, 0, prefix)

        def settled() -> bool:
            with run.lock:
                missing = run.acknowledged - run.delivered
            return not missing or all(inspector_for(view).job(i) is None for i in missing)

        wait_until(settled, timeout=60, interval=0.2, message="the drain to finish")
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=120)
            assert not thread.is_alive(), f"{thread.name} still running"
    with run.lock:
        undelivered = run.acknowledged - run.delivered
    lost = sorted(i for i in undelivered if inspector_for(view).job(i) is None)
    # Records gone, delivered or not (a job that ran before the kill left no trace).
    vanished = sum(1 for i in run.acknowledged if inspector_for(view).job(i) is None)
    figures = {"wait_replicas": wait_replicas, "lagging": lagging, "jobs": JOBS,
               "acknowledged": len(run.acknowledged),
               "delivered": len(run.delivered), "lost": len(lost), "vanished": vanished,
               "killed_after_acks": run.killed_at_ack, "promotion_s": round(promoted, 2),
               "publish_errors": run.publish_errors, "claim_errors": run.claim_errors,
               "seconds": round(time.monotonic() - started, 1)}
    with capsys.disabled():
        print("\nfailover:", json.dumps(figures))
    for backend in (publisher, drainer, view):
        backend.close()
    assert len(run.acknowledged) == JOBS and victim not in cluster.primaries()
    assert run.delivered <= run.acknowledged | set(lost)
    if wait_replicas:
        assert lost == [], f"{len(lost)} acknowledged publishes lost: {lost[:10]}"
