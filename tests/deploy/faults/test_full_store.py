"""A full or evicting store is an outage, not a crash (issue 27).

* Redis under ``noeviction`` filled mid-drain (a filler key past ``maxmemory``): every write
  is refused with ``OOM``. Workers keep running (they used to exit with "Unrecoverable error:
  OutOfMemoryError"), a worker started meanwhile waits instead of dying, publishers get
  ``OperationalError``; once the filler is deleted the drain completes: 0 lost, 0 run twice.
* Redis with ``min-replicas-to-write 1`` and no replica (a private server's ``CONFIG SET``):
  every write is refused with ``NOREPLICAS``; the same run, lifted by setting it back to 0, on
  prefork and threads (a threads worker was killed by its lease guard for tasks that had
  ended while their acks waited).
* Redis under ``allkeys-lru``: a worker refuses to start, naming ``maxmemory-policy`` and the
  fix; with ``plus_redis_allow_eviction`` it starts.
* PostgreSQL read-only (a database of the test's own, ``default_transaction_read_only``):
  workers keep running, one started meanwhile waits, and every job runs once after (the README
  suite's variant lifts it once every worker met it; the long one after 10 s).
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.matrix import pools
from tests.support import set_pg_read_only, wait_until

from .conftest import open_view
from .harness import Deployment, Publisher, Worker, check
from .servers import PostgresCluster
from .test_worker_kills import publish_mix

FILLER = "filler-of-the-test"


def alive(workers: list[Worker]) -> None:
    for worker in workers:
        assert worker.proc.poll() is None, \
            f"a worker exited (code {worker.proc.returncode}): {worker.log()[-3000:]}"
        assert "Unrecoverable error" not in worker.log(), worker.log()[-3000:]


def refused_in_a_log(workers: list[Worker], text: str) -> bool:
    return any(text in w.log() for w in workers)


def fill(deployment: Deployment) -> None:
    """Set ``maxmemory`` just above what the server uses, then grow a filler key until the
    server refuses it (the server counts a command's own argument, so it grows in steps)."""
    import redis

    client = deployment.server.client()  # type: ignore[attr-defined]
    used = int(client.info("memory")["used_memory"])
    client.config_set("maxmemory", used + 2 * 1024 * 1024)
    with contextlib.suppress(redis.exceptions.OutOfMemoryError):
        for _ in range(1000):
            client.append(FILLER, b"x" * (64 * 1024))
    assert int(client.info("memory")["used_memory"]) > used + 2 * 1024 * 1024 - 64 * 1024


@dataclass(frozen=True)
class Refusal:
    """How a private Redis server is made to refuse writes, and lifted: ``code`` is the
    reply's error code (every warning and publish error names it)."""

    code: str
    reply: str  # the start of the server's reply, as the warnings quote it
    refuse: Callable[[Deployment], None]
    lift: Callable[[Deployment], None]


def _client(deployment: Deployment) -> Any:
    return deployment.server.client()  # type: ignore[attr-defined]


OOM = Refusal("OOM", "OOM command not allowed", fill,
              lambda d: _client(d).delete(FILLER))
#: ``min-replicas-to-write 1`` on a server with no replica: ``NOREPLICAS`` for every write.
NOREPLICAS = Refusal("NOREPLICAS", "NOREPLICAS Not enough good replicas",
                     lambda d: _client(d).config_set("min-replicas-to-write", 1),
                     lambda d: _client(d).config_set("min-replicas-to-write", 0))


def run_redis_full(deployment: Deployment, full_s: float, jobs: int,
                   refusal: Refusal = OOM, pool: str = "prefork") -> None:
    workers = [deployment.start_worker(pool=pool, concurrency=2),
               deployment.start_worker(pool=pool, concurrency=2)]
    publish_mix(deployment, jobs, seconds=0.3)
    deployment.wait_running(2)
    publisher = Publisher(deployment, every=0.1)
    publisher.start()
    refusal.refuse(deployment)
    wait_until(lambda: refused_in_a_log(workers, f"refuses writes: {refusal.code}"),
               timeout=20, message="a worker meeting the refusing store")
    late = deployment.start_worker(pool=pool, concurrency=2, wait=False)  # while refusing
    time.sleep(full_s)  # the fault's duration
    alive([*workers, late])
    refusal.lift(deployment)
    deployment.fault_ended = time.time()
    deployment.wait_ready(late)
    wait_until(lambda: sum(r.label.startswith("p") and r.ended is not None
                           for r in deployment.runs()) >= 3,
               timeout=30, message="publishes after the fault ran")
    publisher.stop()
    alive([*workers, late])
    report = deployment.finish(f"Redis {refusal.code} for {full_s:.0f}s, lease "
                               f"{deployment.vt:.0f}s")
    assert report.publish_errors, "no publish ever met the refusing store"
    assert set(report.publish_errors) == {"OperationalError"}, publisher.tracebacks
    assert all(refusal.code in e for e in deployment.errors), deployment.errors[:3]
    warnings = [line for w in workers for line in w.log().splitlines()
                if "WARNING" in line and "refuses writes" in line]
    assert warnings and all(refusal.reply in line for line in warnings), warnings
    check(report, recovery_within=deployment.vt + 10)


def test_a_redis_store_out_of_memory_mid_drain(deploy: Callable[..., Deployment]) -> None:
    run_redis_full(deploy("redis full", "redis-rdb", vt=6.0), full_s=3.0, jobs=40)


@pytest.mark.long
def test_a_redis_store_out_of_memory_mid_drain_long(
        deploy: Callable[..., Deployment]) -> None:
    run_redis_full(deploy("redis full-long", "redis-rdb", vt=30.0), full_s=20.0, jobs=200)


@pytest.mark.long
@pools("prefork", "threads")
def test_a_redis_store_short_of_replicas_mid_drain(deploy: Callable[..., Deployment],
                                                   pool: str) -> None:
    """The issue's figure: writes refused for 10 s (under a 15 s lease). Long only: the
    README suite's OOM variant runs the same path (one parser classifies both replies), and
    ``tests/stores/test_store_refusals.py`` checks ``NOREPLICAS`` at the store."""
    run_redis_full(deploy(f"redis noreplicas {pool}", "redis-rdb", vt=15.0), full_s=10.0,
                   jobs=80, refusal=NOREPLICAS, pool=pool)


def test_a_worker_refuses_an_evicting_redis_store_unless_told(
        deploy: Callable[..., Deployment], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PLUS_FAULT_ALLOW_EVICTION", "1")  # the test's publisher opts out
    deployment = deploy("evicting redis", "redis-rdb")
    deployment.server.client().config_set("maxmemory-policy", "allkeys-lru")  # type: ignore[attr-defined]
    monkeypatch.delenv("PLUS_FAULT_ALLOW_EVICTION")
    refused = deployment.start_worker(wait=False)
    wait_until(lambda: refused.proc.poll() is not None, timeout=60,
               message="the worker refusing to start")
    log = refused.log()
    assert refused.proc.returncode != 0, log[-3000:]
    assert "maxmemory-policy='allkeys-lru'" in log, log[-3000:]
    assert "CONFIG SET maxmemory-policy noeviction" in log, log[-3000:]
    monkeypatch.setenv("PLUS_FAULT_ALLOW_EVICTION", "1")
    started = deployment.start_worker()
    assert "maxmemory-policy=allkeys-lru (plus_redis_allow_eviction=True)" in started.log()
    deployment.publish("fault.work", "w0", 0.05)
    deployment.finish("allkeys-lru refused; the opt-out starts")


@pytest.fixture
def own_pg_database(pg_cluster: PostgresCluster) -> Iterator[str]:
    """A database of the test's own (its read-only switch touches no other test)."""
    import psycopg

    name = f"plus_readonly_{uuid.uuid4().hex[:10]}"
    url = pg_cluster.create_database(name)
    yield url
    with contextlib.suppress(Exception), psycopg.connect(pg_cluster.url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


@pytest.fixture
def pg_read_only_deployment(own_pg_database: str, tmp_path: Path,
                            prefix: str) -> Iterator[Deployment]:
    deployment = Deployment("postgres read-only", "postgres", f"plus+{own_pg_database}",
                            prefix, tmp_path,
                            lambda: open_view("postgres", own_pg_database, prefix), 15.0)
    yield deployment
    deployment.stop_workers()
    deployment.ledger_anchor.close()
    with contextlib.suppress(Exception):
        deployment.app.close()
    with contextlib.suppress(Exception):
        deployment.view.close()


def run_pg_read_only(deployment: Deployment, database: str, read_only_s: float,
                     jobs: int, pool: str = "prefork") -> None:
    workers = [deployment.start_worker(pool=pool, concurrency=2),
               deployment.start_worker(pool=pool, concurrency=2)]
    publish_mix(deployment, jobs, seconds=0.3)
    deployment.wait_running(2)
    set_pg_read_only(database, True)
    refused_at = time.monotonic()
    wait_until(lambda: refused_in_a_log(workers, "read-only transaction"), timeout=20,
               message="a worker meeting the read-only database")
    late = deployment.start_worker(pool=pool, concurrency=2, wait=False)  # while read-only
    wait_until(lambda: "SQLSTATE 25006" in late.log(), timeout=30,
               message="the worker started meanwhile meeting the read-only database")
    time.sleep(max(0.0, read_only_s - (time.monotonic() - refused_at)))  # the fault's length
    alive([*workers, late])
    set_pg_read_only(database, False)
    deployment.fault_ended = time.time()
    lasted = time.monotonic() - refused_at
    deployment.wait_ready(late)
    report = deployment.finish(f"read-only for {lasted:.1f}s, lease {deployment.vt:.0f}s")
    alive([*workers, late])
    warnings = [line for w in workers for line in w.log().splitlines()
                if "WARNING" in line and "refuses writes" in line]
    assert warnings and all("25006" in line for line in warnings), warnings
    check(report, recovery_within=deployment.vt + 10)


def test_a_read_only_postgresql_database_mid_drain(
        pg_read_only_deployment: Deployment, own_pg_database: str) -> None:
    """The README suite's variant: read-only until every worker (a late one too) met it."""
    run_pg_read_only(pg_read_only_deployment, own_pg_database, read_only_s=0.0, jobs=20)


@pytest.mark.long
@pools("prefork", "threads")
def test_a_read_only_postgresql_database_mid_drain_long(
        pg_read_only_deployment: Deployment, own_pg_database: str, pool: str) -> None:
    """The issue's figure: read-only for 10 s (under a 15 s lease)."""
    run_pg_read_only(pg_read_only_deployment, own_pg_database, read_only_s=10.0, jobs=40,
                     pool=pool)


def test_jobs_whose_messages_were_evicted_are_dead_lettered_and_the_worker_goes_on(
        deploy: Callable[..., Deployment], monkeypatch: pytest.MonkeyPatch) -> None:
    """What ``allkeys-lru`` does to a waiting job (its message key deleted), done by hand so
    that exactly those jobs lose their message: a worker (allowed to run on an evicting
    server) dead-letters them with reason 'message missing' and runs the others; it used to
    crash-loop on ``TypeError`` in ``envelope_bytes``."""
    monkeypatch.setenv("PLUS_FAULT_ALLOW_EVICTION", "1")
    deployment = deploy("evicted messages", "redis-rdb")
    client = deployment.server.client()  # type: ignore[attr-defined]
    client.config_set("maxmemory-policy", "allkeys-lru")
    evicted = []
    for n in range(30):
        job_id = deployment.publish("fault.work", f"w{n}", 0.05, dead=n % 3 == 0)
        if n % 3 == 0:
            evicted.append(job_id)
    for job_id in evicted:
        assert client.delete(f"{deployment.prefix}:m:{job_id}") == 1
    worker = deployment.start_worker(concurrency=2)
    report = deployment.finish(f"{len(evicted)} of 30 messages evicted before the claim")
    alive([worker])
    assert "TypeError" not in worker.log(), worker.log()[-3000:]
    assert report.dead_lettered == len(evicted) and report.completed == 30 - len(evicted)
    for job_id in evicted:
        record = deployment.inspect.job(job_id) or {}
        assert record.get("reason") == "message missing", record
    check(report)
