"""Fixtures of the backend-specific store tests (the shared rules are in tests/fast/conformance).

Redis: ``make_redis`` / ``redis_store`` on a unique key prefix (cleaned afterwards) and ``raw``,
a decode_responses client for reading the keys. SQLite: ``make_sqlite`` / ``store`` on one
database file (``db_path``) and ``db``, a direct connection for reading (and, rarely, editing)
the tables. Both come from :mod:`tests.fast.conformance.stores`, as the conformance suite's do.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from celery_plus.stores.redis.backend import RedisBackend
from celery_plus.stores.sqlite.backend import SQLiteBackend
from tests.fast.conformance.stores import REDIS_URL, backends_on_one_store, sqlite_file


def _opener_fixture(kind: str) -> Any:
    """Fixture ``make_<kind>``: open backends of ``kind`` on the test's store."""

    @pytest.fixture(name=f"make_{kind}")
    def opener(tmp_path: Path) -> Iterator[Callable[..., Any]]:
        with backends_on_one_store(kind, tmp_path) as make:
            yield make

    return opener


make_redis = _opener_fixture("redis")
make_sqlite = _opener_fixture("sqlite")


@pytest.fixture
def redis_store(make_redis: Callable[..., RedisBackend]) -> RedisBackend:
    return make_redis()


@pytest.fixture
def raw() -> Iterator[redis.Redis]:
    """A decode_responses client for reading the store's keys directly."""
    client = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return sqlite_file(tmp_path)


@pytest.fixture
def store(make_sqlite: Callable[..., SQLiteBackend]) -> SQLiteBackend:
    return make_sqlite()


@pytest.fixture
def db(store: SQLiteBackend, db_path: Path) -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(db_path, isolation_level=None, timeout=10)
    yield conn
    conn.close()
