"""`app.publish_batch()`: many publishes stored in one round trip, uniqueness still per job."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from celery_plus import Celery
from celery_plus.exceptions import DuplicateTask
from celery_plus.model.store import Backend
from celery_plus.settings import resolve
from celery_plus.stores.registry import open_store
from tests.fast.conformance.stores import PG_URL
from tests.inspectors import inspector_for
from tests.support import drop_pg_schema

REDIS_URL = "redis://127.0.0.1:6379/0"


@pytest.fixture(params=["redis", "sqlite", "postgres"])
def broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, str]]:
    prefix = f"batch{uuid.uuid4().hex[:8]}"
    if request.param == "redis":
        yield f"plus+{REDIS_URL}", prefix
        client = redis.Redis.from_url(REDIS_URL)
        for key in client.scan_iter(f"{prefix}:*"):
            client.delete(key)
        client.close()
    elif request.param == "postgres":  # the prefix names the schema (one statement a batch)
        yield f"plus+{PG_URL}", prefix
        drop_pg_schema(PG_URL, prefix)
    else:
        yield f"plus+sqlite:///{tmp_path}/broker.db", prefix


def make(broker: tuple[str, str]) -> tuple[Celery, Backend, dict[str, Any]]:
    url, prefix = broker
    app = Celery("batch", broker=url, set_as_current=False)
    app.conf.plus_key_prefix = prefix
    app.conf.plus_pg_schema = prefix
    calls: dict[str, Any] = {}

    @app.task(name="b.unique", unique_by=["key"])
    def unique(key: str, n: int) -> None: ...

    @app.task(name="b.strict", unique_by=["key"], unique_on_duplicate="raise")
    def strict(key: str) -> None: ...

    @app.task(name="b.plain")
    def plain(n: int) -> None: ...

    calls.update(unique=unique, strict=strict, plain=plain)
    backend = open_store(url.removeprefix("plus+"),
                         resolve({"plus_key_prefix": prefix, "plus_pg_schema": prefix}))
    return app, backend, calls


def test_jobs_are_stored_when_the_block_ends_and_duplicates_resolve_in_order(broker) -> None:
    app, backend, tasks = make(broker)
    with app.publish_batch():
        results = [tasks["unique"].delay("a", n) for n in range(3)]
        results += [tasks["unique"].delay("b", 0), tasks["plain"].delay(1)]
        assert all(r.deduplicated is None for r in results)
        assert inspector_for(backend).job(results[0].id) is None  # nothing stored yet
    first = results[0]
    assert first.deduplicated is False
    assert [r.deduplicated for r in results[1:3]] == [True, True]
    assert {r.id for r in results[:3]} == {first.id}
    assert results[3].deduplicated is False and results[4].deduplicated is False
    assert backend.size("celery") == 3
    assert inspector_for(backend).holder("b.unique:key=\"a\"") == first.id


def test_raise_mode_raises_after_the_batch_is_stored(broker) -> None:
    app, backend, tasks = make(broker)
    with pytest.raises(DuplicateTask) as err, app.publish_batch():
        first = tasks["strict"].delay("k")
        tasks["strict"].delay("k")
        tasks["plain"].delay(2)
    assert err.value.holder_id == first.id
    assert backend.size("celery") == 2


def test_an_exception_inside_the_block_publishes_nothing(broker) -> None:
    app, backend, tasks = make(broker)
    with pytest.raises(RuntimeError), app.publish_batch():
        tasks["plain"].delay(1)
        raise RuntimeError("abort")
    assert backend.size("celery") == 0
