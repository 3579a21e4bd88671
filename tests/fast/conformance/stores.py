"""Isolated stores for store-level tests: one per test, any number of backends on it.

Redis: a unique key prefix whose keys are deleted afterwards. SQLite: a database file in the
test's ``tmp_path`` (:func:`sqlite_file`) that every backend instance opens. PostgreSQL: a
fresh schema of the test database (``PLUS_TEST_PG``), dropped afterwards. Memory: one
in-process store (the reference model, ``celery_plus.stores.memory``) shared by the test's
backends.
"""

from __future__ import annotations

import contextlib
import functools
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import redis

from celery_plus.model.options import StoreOptions
from celery_plus.model.store import Backend
from celery_plus.stores.redis.backend import RedisBackend
from celery_plus.stores.sqlite.backend import SQLiteBackend
from tests.support import drop_pg_schema

REDIS_URL = os.environ.get("PLUS_TEST_REDIS", "redis://127.0.0.1:6379/0")

#: Options every test backend gets unless the test says otherwise: 30 s leases, and
#: maintenance throttled for 1 ms only (so a test can run one pass after another).
DEFAULTS: dict[str, Any] = {"lease_ms": 30_000, "maintenance_interval_ms": 1}

Opener = Callable[..., Backend]


@contextlib.contextmanager
def redis_store(tmp_path: Path, *, functions: bool = True) -> Iterator[Opener]:
    """Backends on a fresh key prefix of the test Redis; its keys are deleted on exit.

    ``functions=False``: the backends run their Lua with EVALSHA, as on a Redis without
    Redis Functions (before 7.0), instead of the function library. The function-library
    variant stores jobs in the compact layout (``plus_redis_compact_records``, the default), the
    EVALSHA one in the hash layout (the setting off), so the whole suite runs on both layouts.
    """
    prefix = f"c{uuid.uuid4().hex[:10]}"

    def open_backend(**options: Any) -> RedisBackend:
        options.setdefault("compact_records", functions)
        backend = RedisBackend(REDIS_URL, StoreOptions(prefix=prefix, **options))
        backend.scripts.functions = functions
        return backend

    try:
        yield open_backend
    finally:
        client = redis.Redis.from_url(REDIS_URL)
        keys = list(client.scan_iter(f"{prefix}:*", count=1000))
        for i in range(0, len(keys), 500):
            client.delete(*keys[i:i + 500])
        client.close()


@contextlib.contextmanager
def redis_cluster_store(tmp_path: Path) -> Iterator[Opener]:
    """Backends on a fresh key prefix of the test Redis Cluster; its keys are deleted on exit."""
    from redis.cluster import RedisCluster

    from celery_plus.stores.redis.cluster import RedisClusterBackend
    from tests.redis_cluster import CLUSTER_URL_ENV

    url = os.environ[CLUSTER_URL_ENV]
    prefix = f"c{uuid.uuid4().hex[:10]}"

    def open_backend(**options: Any) -> RedisClusterBackend:
        options.setdefault("compact_records", True)
        return RedisClusterBackend(url, StoreOptions(prefix=prefix, **options))

    try:
        yield open_backend
    finally:
        client = RedisCluster.from_url(url.replace("redis+cluster://", "redis://"))
        for key in list(client.scan_iter(f"{prefix}:*", count=1000)):
            client.delete(key)
        client.close()


def sqlite_file(tmp_path: Path) -> Path:
    """The database file of the test's SQLite store."""
    return tmp_path / "store.db"


@contextlib.contextmanager
def sqlite_store(tmp_path: Path) -> Iterator[Opener]:
    """Backends on one database file in ``tmp_path`` (removed with it by pytest)."""
    url = f"sqlite:///{sqlite_file(tmp_path)}"
    yield lambda **options: SQLiteBackend(url, StoreOptions(**options))


@contextlib.contextmanager
def memory_store(tmp_path: Path) -> Iterator[Opener]:
    """Backends on one in-process store (wall clock)."""
    from celery_plus.stores.memory import MemoryBackend, MemoryState

    store = MemoryState()
    yield lambda **options: MemoryBackend(store, StoreOptions(**options))


PG_URL = os.environ.get("PLUS_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")


@contextlib.contextmanager
def postgres_store(tmp_path: Path) -> Iterator[Opener]:
    """Backends on a fresh schema of the test database; the schema is dropped on exit."""
    from celery_plus.stores.postgres.backend import PostgresBackend

    schema = f"c{uuid.uuid4().hex[:10]}"
    try:
        yield lambda **options: PostgresBackend(
            PG_URL, StoreOptions(**options), schema=schema)
    finally:
        drop_pg_schema(PG_URL, schema)


#: Backend name -> a context manager giving an opener of backends on one isolated store.
OPENERS: dict[str, Callable[[Path], contextlib.AbstractContextManager[Opener]]] = {
    "redis": redis_store,
    "redis-eval": functools.partial(redis_store, functions=False),
    "redis-cluster": redis_cluster_store,
    "sqlite": sqlite_store,
    "postgres": postgres_store,
    "memory": memory_store,
}


@contextlib.contextmanager
def backends_on_one_store(kind: str, tmp_path: Path) -> Iterator[Opener]:
    """``make(**options)`` opening backends of ``kind`` on one store; all closed on exit."""
    made: list[Backend] = []
    with OPENERS[kind](tmp_path) as open_backend:

        def make(**options: Any) -> Backend:
            backend = open_backend(**{**DEFAULTS, **options})
            made.append(backend)
            return backend

        try:
            yield make
        finally:
            for backend in made:
                backend.close()
