"""The kombu-channel behaviour suite's stores: ``store``, one isolated store per test.

The suite drives the ``plus`` transport through kombu's own API (``Connection``,
``Producer``, ``Consumer``, ``SimpleQueue``), no Celery worker. It runs on the stores named
by ``PLUS_CHANNEL_STORES`` (comma-separated: ``memory``, ``sqlite``, ``redis``,
``postgres``); by default ``memory,sqlite``, which need no network (``unshare -n`` runs
them), so the root conftest starts no PostgreSQL for this folder unless ``postgres`` is
named (``tests/conftest.py``: ``needs_postgres``). ``tests/stores/channel`` runs the same
suite on ``redis`` and ``postgres``.

* memory: ``plus+memory://<name>``, an in-process store of its own, forgotten afterwards;
* sqlite: a database file in the test's ``tmp_path``;
* redis: a key prefix of ``PLUS_TEST_REDIS`` (default ``127.0.0.1:6379/0``), deleted after;
* postgres: a schema of ``PLUS_TEST_PG``, dropped after.

``Store.view`` is a backend on the same store, for what kombu cannot see (a job's state,
its dead-letter reason).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kombu
import pytest

from celery_plus import settings
from celery_plus.model.store import Backend
from celery_plus.stores.registry import open_store
from tests.inspectors import Inspector, inspector_for

STORES_ENV = "PLUS_CHANNEL_STORES"
DEFAULT_STORES = "memory,sqlite"
KNOWN = ("memory", "sqlite", "redis", "postgres")


def channel_stores() -> list[str]:
    """The stores the suite runs on (``PLUS_CHANNEL_STORES``, default ``memory,sqlite``)."""
    names = [n.strip() for n in os.environ.get(STORES_ENV, DEFAULT_STORES).split(",")
             if n.strip()]
    unknown = sorted(set(names) - set(KNOWN))
    if unknown:
        raise pytest.UsageError(f"{STORES_ENV}: unknown stores {unknown} (known: {KNOWN})")
    return names


@dataclass
class Store:
    kind: str
    url: str
    options: dict[str, Any]
    view: Backend

    def connection(self, **options: Any) -> kombu.Connection:
        return kombu.Connection(self.url, transport_options={**self.options, **options})

    @property
    def inspect(self) -> Inspector:
        """What only tests read of the store (``tests/inspectors``)."""
        return inspector_for(self.view)

    def state(self, job_id: str) -> str | None:
        return (self.inspect.job(job_id) or {}).get("st")


def _drop(kind: str, inner: str, prefix: str) -> None:
    if kind == "redis":
        import redis

        client = redis.Redis.from_url(inner)
        try:
            keys = list(client.scan_iter(f"{prefix}:*", count=1000))
            for i in range(0, len(keys), 500):
                client.delete(*keys[i:i + 500])
        finally:
            client.close()
    elif kind == "postgres":
        from tests.support import drop_pg_schema

        drop_pg_schema(inner, prefix)
    elif kind == "memory":
        from celery_plus.stores.memory.state import forget_named

        forget_named(inner.partition("://")[2])


@contextlib.contextmanager
def channel_store(kind: str, tmp_path: Path) -> Iterator[Store]:
    """An isolated store of ``kind`` for one test, dropped afterwards."""
    prefix = f"ch{uuid.uuid4().hex[:10]}"
    inner = {
        "memory": f"memory://{prefix}",
        "sqlite": f"sqlite:///{tmp_path / 'store.db'}",
        "redis": os.environ.get("PLUS_TEST_REDIS", "redis://127.0.0.1:6379/0"),
        "postgres": os.environ.get("PLUS_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test"),
    }[kind]
    options: dict[str, Any] = {"plus_key_prefix": prefix, "plus_pg_schema": prefix,
                               "plus_poll_interval": 0.2}
    view = open_store(inner, settings.resolve(options))
    try:
        yield Store(kind, f"plus+{inner}", options, view)
    finally:
        view.close()
        _drop(kind, inner, prefix)


@pytest.fixture(params=channel_stores())
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    with channel_store(request.param, tmp_path) as made:
        yield made
