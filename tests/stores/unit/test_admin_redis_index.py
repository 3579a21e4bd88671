"""The Redis admin's listing index (``stores/redis/lua/admin/index_*.lua``) at its edges.

The conformance suite checks filtered listings on every backend; these are the Redis index's
own corner cases, on a real Redis key prefix: a sync that reads in batches across members
that share a finish time (many jobs failing in one millisecond), members arriving at the
index's high-water mark, and a task id reused on another queue while its old entry is still
indexed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

from celery_plus.admin import Admin, admin_for
from celery_plus.model.store import Backend, Settle
from tests.fast.conformance.stores import REDIS_URL, backends_on_one_store
from tests.fast.conformance.support import claim
from tests.fast.conformance.test_admin import dead, job


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[Backend]:
    with backends_on_one_store("redis", tmp_path) as make:
        yield make()


@pytest.fixture
def admin(backend: Backend, monkeypatch: pytest.MonkeyPatch) -> Admin:
    monkeypatch.setattr("celery_plus.stores.redis.listing_index.SYNC_BATCH", 3)
    # Reads sync as many batches as they need here (a read's bound: test_redis_listing_index_build)
    monkeypatch.setattr("celery_plus.stores.redis.listing_index.READ_BATCHES", 100)
    return Admin(admin_for(backend))


@pytest.fixture
def same_finish_time(backend: Backend) -> Callable[[int], None]:
    """Give every dead letter the finish score ``ms`` (as if they failed in one ms)."""
    client = redis.Redis.from_url(REDIS_URL)

    def stamp(ms: int) -> None:
        key = f"{backend.prefix}:dead"  # type: ignore[attr-defined]
        client.zadd(key, {m: ms for m in client.zrange(key, 0, -1)})

    return stamp


def ids(admin: Admin, **filters: str) -> list[str]:
    return [r.id for r in admin.jobs("failed", per_page=1000, **filters).items]


def test_a_sync_reads_batches_across_members_of_one_finish_time(
        backend: Backend, admin: Admin, same_finish_time: Callable[[int], None]) -> None:
    for i in range(8):
        dead(backend, f"m{i}", queue="mail")
    dead(backend, "o1", queue="other")
    now = backend.now_ms()
    same_finish_time(now)
    # ties are ordered by task id, descending
    assert ids(admin, queue="mail") == [f"m{i}" for i in range(7, -1, -1)]
    assert admin.jobs("failed", queue="other").total == 1
    # more members at the very score the index reached, then one a little below it
    for i in range(8, 12):
        dead(backend, f"m{i}", queue="mail")
    same_finish_time(now)
    assert admin.jobs("failed", queue="mail", per_page=1).total == 12
    dead(backend, "late", queue="mail")
    same_finish_time(now - 500)  # a clock step back, within the sync's margin
    assert admin.jobs("failed", queue="mail", per_page=1).total == 13
    assert {q.queue: q.failed for q in admin.status().queues} == {"mail": 13, "other": 1}


def test_a_task_id_reused_on_another_queue_leaves_its_old_queue(
        backend: Backend, admin: Admin) -> None:
    dead(backend, "x", queue="mail")
    dead(backend, "y", queue="mail")
    assert ids(admin, queue="mail") == ["y", "x"]
    admin.discard("x")
    job(backend, "x", queue="other")  # a discarded id published anew starts anew
    [got] = claim(backend, max_jobs=1, queues=["other"]).claims
    backend.settle([Settle("x", got.token, "fail", {"reason": "task failed"})])
    page = admin.jobs("failed", queue="mail")
    assert ([r.id for r in page.items], page.total) == (["y"], 1)
    assert ids(admin, queue="other") == ["x"]


def test_the_group_list_indexes_a_bounded_step_per_read_and_says_what_is_left(
        backend: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first read of the groups of a store nobody looked at built the whole index (3 to
    5 s at 100,000 dead letters, issue #28): each read now indexes a bounded step, the oldest
    first, and says how many newer dead letters it has not counted; a group's page reads
    them all."""
    monkeypatch.setattr("celery_plus.stores.redis.error_groups.SYNC_BATCH", 2)
    monkeypatch.setattr("celery_plus.stores.redis.error_groups.SYNC_BATCHES_PER_READ", 1)
    for n in range(5):
        dead(backend, f"d{n}", error=f"boom {n % 2}")
    with Admin(admin_for(backend)) as admin:
        steps = [admin.error_groups() for _ in range(3)]
        assert [s.unindexed for s in steps] == [3, 1, 0]
        assert [sum(g.count for g in s.groups) for s in steps] == [2, 4, 5]
        assert steps[0].to_dict()["unindexed"] == 3
        dead(backend, "d5", error="boom 0")
        dead(backend, "d6", error="boom 0")
        dead(backend, "d7", error="boom 0")
        page = admin.error_group_jobs("ValueError", "boom 0")
        assert page.total == 6  # d0 d2 d4 d5 d6 d7: the page synced all
        assert admin.error_groups().unindexed == 0
