"""publish.lua's lean path (a plain publish: a new id, nine arguments, no ETA) on a real Redis.

The conformance suite runs every publish rule through it (the function-library variant stores
the compact layout, whose plain publishes take it) and through the general path (the EVALSHA
variant, hash layout); these tests check that the two paths write the same job, and the
one thing the lean path does differently: the boot mark is written by the store's first job.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from celery_plus.model.rules import PRIORITY_FACTOR
from celery_plus.model.store import NewJob
from celery_plus.stores.redis.backend import RedisBackend
from tests.fast.conformance.stores import REDIS_URL, redis_store


@pytest.fixture
def backend(tmp_path: object) -> Iterator[RedisBackend]:
    with redis_store(tmp_path) as open_backend:  # type: ignore[arg-type]
        made = open_backend(deflate=False)
        assert isinstance(made, RedisBackend)
        yield made
        made.close()


@pytest.fixture
def client() -> Iterator[redis.Redis]:
    made = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    yield made
    made.close()


def job(job_id: str, priority: int = 0) -> NewJob:
    return NewJob(id=job_id, queue="q", message='{"body": "e30="}', name="t.add",
                  priority=priority, max_deliveries=3)


def test_the_lean_path_writes_the_job_the_general_path_writes(
        backend: RedisBackend, client: redis.Redis) -> None:
    p = backend.prefix
    for n, priority in enumerate((0, 4)):
        lean, general = job(f"lean{n}", priority), job(f"general{n}", priority)
        assert len(backend._publish_args(lean)) == 9
        assert backend.publish(lean).state == "enqueued"
        # Every argument sent (none left out at its default): the general path.
        assert backend.scripts.run("publish", backend._publish_args(general, whole=True)) == 1
        records = [client.hgetall(f"{p}:job:{j.id}") for j in (lean, general)]
        scores = [int(r.pop("score")) for r in records]
        assert records[0].pop("enq") and records[1].pop("enq")
        assert records[0] == records[1] == {"q": "q", "name": "t.add", "dl": "0", "mdl": "3",
                                            "due": "0", "st": "enqueued"}
        # Published one after the other: the same priority, the next place in line.
        assert scores[1] == scores[0] + 1 and scores[0] // PRIORITY_FACTOR == priority
        assert [client.get(f"{p}:m:{j.id}") for j in (lean, general)] == [lean.message] * 2
        assert client.zmscore(f"{p}:q:q", [lean.id, general.id]) == scores
    assert client.smembers(f"{p}:queues") == {"q"}
    assert client.llen(f"{p}:wake:q") == 4


def test_the_boot_mark_is_written_by_the_first_job_and_kept_by_the_general_path(
        backend: RedisBackend, client: redis.Redis) -> None:
    p = backend.prefix
    backend.publish(job("a"))
    run = client.hget(f"{p}:boot", "run")
    assert run and len(run) == 40
    client.delete(f"{p}:boot")
    backend.publish(job("b"))  # lean: the store had its first job already
    assert not client.exists(f"{p}:boot")
    backend.publish(job("b"))  # the same id again: the general path marks it
    assert client.hget(f"{p}:boot", "run") == run
