"""Defect 12 of issue 12, the other side: arguments that are odd but JSON (lone surrogates,
NUL, 1 MB, the separators the stores' scripts use) are keyed and coalesce, on every store;
only arguments that are not JSON are refused (tests/fast/unit/test_non_json_arguments.py)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from celery_plus import Celery
from tests.fast.conformance.stores import PG_URL, REDIS_URL
from tests.support import drop_pg_schema

ODD = ["\ud800", "a\x00b", "x" * 1_000_000, "a\x1fb\x06\x16c:d|e;f"]


@pytest.fixture(params=["redis", "sqlite", "postgres"])
def app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Celery]:
    name = f"odd{uuid.uuid4().hex[:10]}"
    broker = {"redis": f"plus+{REDIS_URL}", "sqlite": f"plus+sqlite:///{tmp_path}/b.db",
              "postgres": f"plus+{PG_URL}"}[request.param]
    app = Celery("odd", broker=broker, set_as_current=False)
    app.conf.update(plus_key_prefix=name, plus_pg_schema=name)
    yield app
    app.close()
    if request.param == "redis":
        client = redis.Redis.from_url(REDIS_URL)
        keys = list(client.scan_iter(f"{name}:*"))
        if keys:
            client.delete(*keys)
    elif request.param == "postgres":
        drop_pg_schema(PG_URL, name)


@pytest.mark.parametrize("value", ODD, ids=["surrogate", "nul", "1mb", "separators"])
def test_odd_json_arguments_are_keyed_and_coalesce(app: Celery, value: str) -> None:
    @app.task(name="odd.unique", unique=True)
    def unique(value: str) -> None: ...

    first = unique.delay(value)
    again = unique.delay(value)
    other = unique.delay(value + "!")
    assert (first.deduplicated, again.deduplicated, other.deduplicated) == (False, True, False)
    assert again.id == first.id
