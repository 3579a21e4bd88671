"""The project end-to-end tests run: a celery-plus app built per test by :func:`make_app`.

Worker processes load ``tests.e2e.proj:app``, which reads its key prefix (and a few settings)
from the environment; the test process builds its own client with the same tasks and prefix.
Tasks report what they did to Redis (``{prefix}:events``), so tests assert on facts the
tasks recorded themselves.
"""

from __future__ import annotations

import json
import os
import re
import time
from typing import Any

import redis

from celery_plus import Celery

REDIS_URL = os.environ.get("PLUS_TEST_REDIS", "redis://127.0.0.1:6379/0")
RESULT_URL = os.environ.get("PLUS_TEST_RESULTS", "redis://127.0.0.1:6379/1")


def record(prefix: str, kind: str, **data: Any) -> None:
    """Append an event (with time and pid) to the test's event list."""
    event = {"kind": kind, "t": time.time(), "pid": os.getpid(), **data}
    client = redis.Redis.from_url(REDIS_URL)
    client.rpush(f"{prefix}:events", json.dumps(event))
    client.close()


def events(prefix: str, kind: str | None = None) -> list[dict[str, Any]]:
    client = redis.Redis.from_url(REDIS_URL)
    raw = client.lrange(f"{prefix}:events", 0, -1)
    client.close()
    out = [json.loads(e) for e in raw]
    return [e for e in out if kind is None or e["kind"] == kind]


def pg_schema(prefix: str) -> str:
    """The plus+postgresql:// schema of a test prefix: one schema per test."""
    name = re.sub(r"[^a-z0-9_]", "_", prefix.lower())
    return ("p" + name if not name[:1].isalpha() or name.startswith("pg_") else name)[:48]


def make_app(prefix: str, **settings: Any) -> Celery:
    # PLUS_TEST_BROKER swaps the durable store (set per test by conftest.py's broker_url).
    broker = os.environ.get("PLUS_TEST_BROKER", f"plus+{REDIS_URL}")
    app = Celery("proj", broker=broker, backend=RESULT_URL, set_as_current=False)
    app.conf.update(
        plus_key_prefix=prefix,
        plus_pg_schema=pg_schema(prefix),
        plus_visibility_timeout=float(os.environ.get("PLUS_TEST_VT", "5")),
        plus_maintenance_interval=0.25,
        plus_poll_interval=0.5,
        task_default_queue="celery",
        result_expires=600,
        worker_hijack_root_logger=False,
        # How long the prefork pool waits for a dead child's result before WorkerLostError.
        worker_lost_wait=float(os.environ.get("PLUS_TEST_LOST_WAIT", "10")),
        # A remote-control node queue's x-expires (Celery's default: 10 s); its binding in the
        # store lapses after twice that, at least 10 s, once its worker is gone.
        control_queue_expires=float(os.environ.get("PLUS_TEST_CONTROL_EXPIRES", "10")),
        **settings,
    )
    counter = redis.Redis.from_url(REDIS_URL)

    @app.task(name="proj.add")
    def add(x: int, y: int) -> int:
        return x + y

    @app.task(name="proj.mark")
    def mark(n: int, queue: str = "", priority: int = 0) -> int:
        record(prefix, "mark", n=n, queue=queue, priority=priority)
        return n

    @app.task(name="proj.sleep_mark")
    def sleep_mark(n: int, seconds: float) -> int:
        record(prefix, "start", n=n)
        time.sleep(seconds)
        record(prefix, "end", n=n)
        return n

    @app.task(name="proj.publish_then_sleep")
    def publish_then_sleep(n: int, seconds: float) -> int:
        """Publishes first (the pool process opens its own broker connection), then sleeps."""
        mark.delay(-n - 1)
        record(prefix, "sleeping", n=n)
        time.sleep(seconds)
        return n

    @app.task(name="proj.unique_running", unique=True)
    def unique_running(key: str, seconds: float) -> str:
        record(prefix, "start", key=key)
        time.sleep(seconds)
        record(prefix, "end", key=key)
        return key

    @app.task(name="proj.unique_pending", unique_by=["key"], unique_window="pending")
    def unique_pending(key: str, seconds: float) -> str:
        record(prefix, "start", key=key)
        time.sleep(seconds)
        return key

    @app.task(name="proj.unique_ttl", unique_by=["key"], unique_ttl=2)
    def unique_ttl(key: str) -> str:
        record(prefix, "start", key=key)
        return key

    @app.task(name="proj.per_customer", concurrency=2, concurrency_key="customer_id")
    def per_customer(customer_id: str, n: int, seconds: float) -> int:
        running = f"{prefix}:running:{customer_id}"
        now = counter.incr(running)
        record(prefix, "start", customer=customer_id, n=n, running=now)
        time.sleep(seconds)
        counter.decr(running)
        record(prefix, "end", customer=customer_id, n=n)
        return n

    @app.task(name="proj.suicide", max_deliveries=3)
    def suicide() -> None:
        record(prefix, "start")
        os.kill(os.getpid(), 9)

    @app.task(name="proj.fail")
    def fail(message: str) -> None:
        raise ValueError(message)

    @app.task(name="proj.flaky", bind=True, unique=True, autoretry_for=(RuntimeError,),
              retry_backoff=0.2, retry_jitter=False, max_retries=5)
    def flaky(self: Any, key: str, succeed_on: int) -> int:
        attempt = self.request.retries + 1
        record(prefix, "attempt", key=key, attempt=attempt)
        if attempt < succeed_on:
            raise RuntimeError(f"attempt {attempt} fails")
        return attempt

    @app.task(name="proj.hard_limit", time_limit=1)
    def hard_limit() -> None:
        time.sleep(5)

    @app.task(name="proj.unique_raise", unique_by=["key"], unique_on_duplicate="raise")
    def unique_raise(key: str) -> str:
        record(prefix, "start", key=key)
        return key

    # -- Celery features over plus+redis:// (test_celery_features.py) --------------------
    @app.task(name="proj.tsum")
    def tsum(numbers: list[int]) -> int:
        record(prefix, "tsum", numbers=numbers)
        return sum(numbers)

    @app.task(name="proj.soft_limited", soft_time_limit=1)
    def soft_limited(seconds: float) -> str:
        from celery.exceptions import SoftTimeLimitExceeded

        record(prefix, "start", task="soft_limited")
        try:
            time.sleep(seconds)
        except SoftTimeLimitExceeded:
            record(prefix, "soft_limit")
            return "soft-limit-caught"
        return "finished"

    @app.task(name="proj.replaced", bind=True)
    def replaced(self: Any, x: int, y: int) -> int:
        record(prefix, "replaced", id=self.request.id)
        raise self.replace(add.s(x, y))

    @app.task(name="proj.tx_mark", unique=True)
    def tx_mark(key: str) -> str:
        """A unique job enqueued inside a database transaction (test_transactional.py)."""
        record(prefix, "tx", key=key)
        return key

    @app.task(name="proj.fail_until_fixed", unique=True)
    def fail_until_fixed(key: str) -> str:
        """Fails (a dead letter) until ``{prefix}:fixed:{key}`` is set (test_admin_cli.py)."""
        record(prefix, "attempt", key=key)
        if not counter.get(f"{prefix}:fixed:{key}"):
            raise RuntimeError(f"{key} is not fixed yet")
        record(prefix, "fixed", key=key)
        return key

    @app.task(name="proj.reject_then_succeed", bind=True)
    def reject_then_succeed(self: Any) -> str:
        """Celery's integration task: Reject(requeue=True) until delivered again."""
        from celery.exceptions import Reject

        redelivered = bool(self.request.delivery_info.get("redelivered"))
        record(prefix, "delivery", redelivered=redelivered)
        if not redelivered:
            raise Reject(requeue=True)
        return "second-pass"

    return app


app = make_app(os.environ.get("PLUS_TEST_PREFIX", "plus-e2e"))
