"""Side effects recorded by the tasks: one Redis list per deployment (``<prefix>:effects``).

Tasks append what they did (and signal handlers what they saw), so a caller can check what
really ran, how often and in which order.
"""

import json
import os
from typing import Any

import redis

from proj.settings import PREFIX

EFFECTS_URL = os.environ.get("PROJ_EFFECTS_URL", "redis://127.0.0.1:6379/0")
KEY = f"{PREFIX}:effects"

_client: "redis.Redis | None" = None


def _redis() -> redis.Redis:
    global _client
    if _client is None:
        _client = redis.Redis.from_url(EFFECTS_URL)
    return _client


def record(kind: str, **data: Any) -> None:
    """Append one effect (``kind`` and JSON-able data) to the deployment's list."""
    _redis().rpush(KEY, json.dumps({"kind": kind, **data}))


def effects(kind: str | None = None, **match: Any) -> list[dict[str, Any]]:
    """Recorded effects in order, optionally only those of ``kind`` matching ``match``."""
    found = [json.loads(raw) for raw in _redis().lrange(KEY, 0, -1)]
    return [e for e in found
            if (kind is None or e["kind"] == kind)
            and all(e.get(k) == v for k, v in match.items())]


def count(name: str) -> int:
    """Increment and return a named counter (e.g. attempts of one call)."""
    return int(_redis().incr(f"{KEY}:{name}"))


def clear() -> None:
    """Forget every recorded effect and counter of this deployment."""
    client = _redis()
    keys = [KEY, *client.scan_iter(f"{KEY}:*", count=1000)]
    client.delete(*keys)
