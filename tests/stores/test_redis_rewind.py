"""Lease tokens across a Redis rewind (issue #27, point 3), on real redis-server processes.

A rewind is a restart from an older RDB or a shorter AOF, or a promoted lagging replica: the
keyspace forgets its last writes, the token counter and the job records with them. The rule
(``check_boot`` in ``lua/lib.lua``): a claim that finds the keyspace written by another server
process (its ``run_id``, kept in ``P:boot``) raises the counter to the clock in microseconds
and claims nothing for one lease; tokens then go on by one. So a token is never issued twice
for a job, and a settle, heartbeat or continuation under a token of the lost claim changes
nothing. The server restarted here is a private one (``tests/redis_servers.py``); the shared
server's checks run on a fresh prefix of it.
"""

from __future__ import annotations

import shutil
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from celery_plus.model.options import StoreOptions
from celery_plus.model.store import NewJob, Settle, Verdict
from celery_plus.stores.redis.backend import RedisBackend
from tests.fast.conformance.stores import REDIS_URL
from tests.redis_servers import RedisServer, redis_server

Q = "rewind"
LEASE_MS = 400


def backend_on(url: str, prefix: str, functions: bool, lease_ms: int = LEASE_MS) -> RedisBackend:
    backend = RedisBackend(url, StoreOptions(prefix=prefix, lease_ms=lease_ms))
    backend.scripts.functions = functions
    return backend


def publish(backend: RedisBackend, job_id: str, **fields: object) -> None:
    assert backend.publish(NewJob(id=job_id, queue=Q, message=f"msg-{job_id}",
                                  **fields)).accepted  # type: ignore[arg-type]


def rewind(server: RedisServer, dump: Path) -> None:
    """kill -9 the server and start it again from ``dump`` (an older snapshot)."""
    assert server.proc is not None
    server.proc.kill()
    server.proc.wait(timeout=10)
    shutil.copy(dump, server.directory / "dump.rdb")
    server.start()


def claims_after_grace(backend: RedisBackend, ids: set[str], timeout: float = 10) -> dict[str, int]:
    """Claim until every job of ``ids`` is claimed: id -> token (waits by the claims' next due)."""
    got: dict[str, int] = {}
    deadline = time.monotonic() + timeout
    while set(got) != ids:
        assert time.monotonic() < deadline, f"claimed {sorted(got)} of {sorted(ids)}"
        result = backend.claim([Q], "w2", 10)
        got.update({c.job_id: c.token for c in result.claims})
        if set(got) != ids and result.next_due:
            time.sleep(min(result.next_due, 1.0))
    return got


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    with redis_server(tmp_path / "redis") as running:
        yield running


@pytest.mark.parametrize("functions", [True, False], ids=["functions", "evalsha"])
def test_a_restart_from_an_older_snapshot_never_issues_a_token_twice(
        server: RedisServer, tmp_path: Path, functions: bool) -> None:
    prefix = f"r{uuid.uuid4().hex[:8]}"
    before = backend_on(server.url, prefix, functions)
    for job_id in ("a", "b"):
        publish(before, job_id)
    client = server.client()
    client.save()
    dump = tmp_path / "older.rdb"
    shutil.copy(server.directory / "dump.rdb", dump)
    lost = {c.job_id: c.token for c in before.claim([Q], "w1", 10).claims}
    assert lost == {"a": 1, "b": 2}  # normal operation: 1, 2, ...
    before.close()
    restarted_at_us = time.time_ns() // 1000

    rewind(server, dump)
    after = backend_on(server.url, prefix, functions)
    # Back as at the snapshot: both jobs wait, the counter issued nothing yet.
    assert {after.record(i).state for i in lost} == {"enqueued"}  # type: ignore[union-attr]
    # The first claim finds the restart: nothing for one lease, its end as the next due.
    held = after.claim([Q], "w2", 10)
    assert held.claims == [] and held.next_due is not None
    assert 0 < held.next_due <= LEASE_MS / 1000
    # A stale settle of a lost claim changes nothing (the job waits).
    assert after.settle([Settle("a", lost["a"], "requeue")]) == []
    assert after.record("a").state == "enqueued"  # type: ignore[union-attr]

    fresh = claims_after_grace(after, set(lost))
    assert min(fresh.values()) > restarted_at_us > max(lost.values())
    assert max(fresh.values()) < 2 ** 53
    # The lost claims' settles and heartbeats do not touch the new claims.
    assert after.settle([Settle(i, t, "requeue") for i, t in lost.items()]) == []
    assert after.heartbeat(list(lost.items())) == [Verdict.LOST, Verdict.LOST]
    for job_id, token in fresh.items():
        rec = after.record(job_id)
        assert rec is not None and (rec.state, rec.lease_token) == ("running", token)
    # Then tokens go on by one again, and a big token is kept exact in the history.
    assert after.settle([Settle("a", fresh["a"], "requeue", {"reason": "again"})]) == []
    again = claims_after_grace(after, {"a"})
    assert again["a"] == max(fresh.values()) + 1
    assert after.record("a").history[-1]["token"] == fresh["a"]  # type: ignore[union-attr]
    after.close()
    client.close()


def test_a_rate_limited_claim_under_a_clock_token_counts_its_start(
        server: RedisServer, tmp_path: Path) -> None:
    """A token above 10^14 is written exactly where the scripts format it (the rate log)."""
    prefix = f"r{uuid.uuid4().hex[:8]}"
    backend = backend_on(server.url, prefix, True)
    publish(backend, "a", rate_group="g", rate_limit=5, rate_window_ms=60_000)
    client = server.client()
    client.save()
    dump = tmp_path / "older.rdb"
    shutil.copy(server.directory / "dump.rdb", dump)
    backend.close()
    rewind(server, dump)
    backend = backend_on(server.url, prefix, True)
    token = claims_after_grace(backend, {"a"})["a"]
    assert token > 10 ** 15
    backend.rate_started("a", token)
    client = server.client()
    assert client.zrange(f"{prefix}:rate:g", 0, -1) == [f"a:{token}".encode()]
    assert client.zcard(f"{prefix}:ratep:g") == 0
    backend.close()
    client.close()


@pytest.fixture
def shared_prefix() -> Iterator[str]:
    prefix = f"r{uuid.uuid4().hex[:8]}"
    yield prefix
    client = redis.Redis.from_url(REDIS_URL)
    keys = list(client.scan_iter(f"{prefix}:*"))
    if keys:
        client.delete(*keys)
    client.close()


def test_a_store_from_before_the_boot_marker_gets_a_floor_but_no_grace(
        shared_prefix: str) -> None:
    """Upgrading: a counter with no ``P:boot`` next to it may be older than the tokens it
    issued (nothing says otherwise), so it is raised; no grace, since no restart was seen."""
    backend = backend_on(REDIS_URL, shared_prefix, True)
    client = redis.Redis.from_url(REDIS_URL)
    client.set(f"{shared_prefix}:tok", 7)
    publish(backend, "a")
    client.delete(f"{shared_prefix}:boot")  # as a release before the marker left it
    now_us = time.time_ns() // 1000
    [got] = backend.claim([Q], "w1", 10).claims
    assert got.token >= now_us - 5_000_000  # the server's clock, within a margin of skew
    publish(backend, "b")
    [second] = backend.claim([Q], "w1", 10).claims
    assert second.token == got.token + 1
    backend.close()
    client.close()


def test_a_keyspace_another_server_wrote_is_a_restart(shared_prefix: str) -> None:
    """A promoted replica sees the primary's run_id in ``P:boot``: the same as a restart."""
    backend = backend_on(REDIS_URL, shared_prefix, True, lease_ms=300)
    publish(backend, "a")
    client = redis.Redis.from_url(REDIS_URL)
    client.hset(f"{shared_prefix}:boot", "run", "0" * 40)
    held = backend.claim([Q], "w1", 10)
    assert held.claims == [] and held.next_due is not None and held.next_due > 0
    assert backend.claim_job("a", "w1").outcome == "blocked"
    token = claims_after_grace(backend, {"a"})["a"]
    assert token > 10 ** 15
    backend.close()
    client.close()
