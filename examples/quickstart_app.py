"""The quickstart's app: three tasks, one per extension."""

from __future__ import annotations

import os
import time

import redis

from celery_plus import Celery

REDIS = os.environ.get("QUICKSTART_REDIS", "redis://127.0.0.1:6379/0")
PREFIX = os.environ.get("QUICKSTART_PREFIX", "quickstart")

app = Celery("quickstart", broker=f"plus+{REDIS}", backend=REDIS)
app.conf.plus_key_prefix = PREFIX
_r = redis.Redis.from_url(REDIS, decode_responses=True)


@app.task(unique_by=["event_id"])
def handle_webhook(event_id: str) -> str:
    _r.incr(f"{PREFIX}:count:webhook")
    time.sleep(0.5)
    return event_id


@app.task(concurrency=1, concurrency_key="customer")
def build_report(customer: str, n: int) -> str:
    key = f"{PREFIX}:running:{customer}"
    running = _r.incr(key)
    _r.set(f"{PREFIX}:max", max(int(_r.get(f"{PREFIX}:max") or 0), running))
    time.sleep(0.2)
    _r.decr(key)
    return f"{customer}-{n}"


@app.task
def charge_card(card: str) -> None:
    raise ValueError(f"card {card} declined")


def count(name: str) -> int:
    return int(_r.get(f"{PREFIX}:count:{name}") or 0)


def max_parallel() -> int:
    return int(_r.get(f"{PREFIX}:max") or 0)


def dead_letter(task_id: str) -> dict[str, str] | None:
    record = _r.hgetall(f"{PREFIX}:job:{task_id}")
    return record if record.get("st") == "failed" else None


def cleanup() -> None:
    for key in _r.scan_iter(f"{PREFIX}:*", count=1000):
        _r.delete(key)
