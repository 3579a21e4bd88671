"""Fixtures for store-level tests: a RedisBackend on a unique key prefix, cleaned afterwards."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

from celery_plus.transport.redis_backend import RedisBackend

REDIS_URL = os.environ.get("PLUS_TEST_REDIS", "redis://127.0.0.1:6379/0")


@pytest.fixture
def store_prefix() -> Iterator[str]:
    name = f"s{uuid.uuid4().hex[:10]}"
    yield name
    client = redis.Redis.from_url(REDIS_URL)
    keys = list(client.scan_iter(f"{name}:*", count=1000))
    for i in range(0, len(keys), 500):
        client.delete(*keys[i:i + 500])
    client.close()


@pytest.fixture
def make_backend(store_prefix: str) -> Iterator[Callable[..., RedisBackend]]:
    """Build more backends on the test's prefix (e.g. with another lease or retention)."""
    made: list[RedisBackend] = []

    def make(**kwargs: Any) -> RedisBackend:
        kwargs.setdefault("lease_ms", 30_000)
        kwargs.setdefault("maintenance_interval_ms", 1)
        backend = RedisBackend(REDIS_URL, prefix=store_prefix, **kwargs)
        made.append(backend)
        return backend

    yield make
    for backend in made:
        backend.close()


@pytest.fixture
def backend(make_backend: Callable[..., RedisBackend]) -> RedisBackend:
    """The test's backend: 30 s leases, maintenance not throttled."""
    return make_backend()


@pytest.fixture
def raw(store_prefix: str) -> Iterator[redis.Redis]:
    """A decode_responses client for reading the store's keys directly."""
    client = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    yield client
    client.close()
