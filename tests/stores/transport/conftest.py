"""Fixtures of the transport tests: kombu consumers of the ``plus`` transport on each store.

``store`` is one isolated store per test (ids ``redis``, ``sqlite``, ``postgres``): its
broker URL and the ``plus_*`` transport options (a key prefix, a schema), a publisher app,
and ``view``, a backend on the same store for assertions.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kombu
import pytest
import redis

from celery_plus import Celery
from celery_plus.model.options import StoreOptions
from celery_plus.model.store import Backend
from celery_plus.stores.postgres.backend import PostgresBackend
from celery_plus.stores.redis.backend import RedisBackend
from celery_plus.stores.sqlite.backend import SQLiteBackend
from tests.fast.conformance.stores import PG_URL, REDIS_URL
from tests.support import drop_pg_schema


@dataclass
class Store:
    kind: str
    url: str
    options: dict[str, Any]
    app: Celery
    view: Backend

    def connection(self, **options: Any) -> kombu.Connection:
        return kombu.Connection(self.url, transport_options={**self.options, **options})

    def publish(self, n: int = 1) -> list[str]:
        return [self.app.send_task("t.work", (i,)).id for i in range(n)]


@pytest.fixture(params=["redis", "sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    prefix = f"tr{uuid.uuid4().hex[:10]}"
    options: dict[str, Any] = {"plus_key_prefix": prefix, "plus_pg_schema": prefix,
                               "plus_maintenance_interval": 0.1}
    view: Backend
    if request.param == "redis":
        url = f"plus+{REDIS_URL}"
        view = RedisBackend(REDIS_URL, StoreOptions(prefix=prefix))
    elif request.param == "sqlite":
        url = f"plus+sqlite:///{tmp_path / 'store.db'}"
        view = SQLiteBackend(url.removeprefix("plus+"))
    else:
        url = f"plus+{PG_URL}"
        view = PostgresBackend(PG_URL, schema=prefix)
    app = Celery("tr", broker=url, set_as_current=False)
    app.conf.update(task_default_queue="work", task_ignore_result=True, **options)
    yield Store(request.param, url, options, app, view)
    app.close()
    view.close()
    if request.param == "redis":
        client = redis.Redis.from_url(REDIS_URL)
        for key in client.scan_iter(f"{prefix}:*", count=1000):
            client.delete(key)
        client.close()
    elif request.param == "postgres":
        drop_pg_schema(PG_URL, prefix)
