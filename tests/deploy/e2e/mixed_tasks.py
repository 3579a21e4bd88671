"""The task of the mixed-deployment and migration tests, registered on either kind of app.

Imports only ``redis``, so the plain Celery project (``mixed_plain``) stays free of
celery-plus. Each run counts itself and records the worker that ran it, in Redis under the
test's prefix: ``{prefix}:runs`` (task id -> executions), ``{prefix}:host`` (task id ->
worker hostname of the last run), ``{prefix}:order`` (task ids in the order they ran).
"""

from __future__ import annotations

import os
from typing import Any

import redis

REDIS_URL = os.environ.get("PLUS_TEST_REDIS", "redis://127.0.0.1:6379/0")
LEGACY = "legacy"
DURABLE = "durable"


def keyprefix(prefix: str) -> str:
    """kombu's global_keyprefix of a test: its kombu keys sit under the test's prefix."""
    return f"{prefix}:k:"


def register(app: Any, prefix: str) -> None:
    client = redis.Redis.from_url(REDIS_URL)

    @app.task(name="mixed.run", bind=True)
    def run(self: Any, n: int) -> int:
        pipe = client.pipeline(transaction=False)
        pipe.hincrby(f"{prefix}:runs", self.request.id, 1)
        pipe.hset(f"{prefix}:host", self.request.id, self.request.hostname or "")
        pipe.rpush(f"{prefix}:order", self.request.id)
        pipe.execute()
        return n


def runs(prefix: str) -> dict[str, int]:
    client = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        return {k: int(v) for k, v in client.hgetall(f"{prefix}:runs").items()}
    finally:
        client.close()


def order(prefix: str) -> list[str]:
    client = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        return list(client.lrange(f"{prefix}:order", 0, -1))
    finally:
        client.close()


def hosts(prefix: str) -> dict[str, str]:
    client = redis.Redis.from_url(REDIS_URL, decode_responses=True)
    try:
        return dict(client.hgetall(f"{prefix}:host"))
    finally:
        client.close()
