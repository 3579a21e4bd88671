"""The project end-to-end tests run: a celery-plus app built per test by :func:`make_app`.

Worker processes load ``tests.deploy.e2e.proj:app``, which reads its key prefix (and a few settings)
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

from celery_plus import Celery, group

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


class Unprintable(ValueError):
    """An exception that cannot be turned into text (its ``__str__`` and ``__repr__`` raise)."""

    def __str__(self) -> str:
        raise RuntimeError("no str for you")

    def __repr__(self) -> str:
        raise RuntimeError("no repr either")


class Departure(BaseException):
    """A BaseException of the task's own (not an Exception, not SystemExit)."""


class StrNotText(ValueError):
    """``str()`` of it raises TypeError (``__str__`` returns an int, ``__repr__`` bytes)."""

    def __str__(self) -> Any:
        return 42

    def __repr__(self) -> Any:
        return b"bytes"


class Unpicklable(ValueError):
    """Its ``__reduce__`` raises: it cannot be pickled (prefork) nor copied."""

    def __reduce__(self) -> Any:
        raise RuntimeError("no pickle for you")


def _recurse(n: int) -> int:
    return _recurse(n + 1) + 1


def outcome(how: str) -> Any:
    """What ``proj.x_outcome`` raises or returns (issue 11: a worker never exits because
    of it)."""
    import threading

    raises: dict[str, Any] = {
        "generator-exit": lambda: GeneratorExit("bye"),
        "departure": lambda: Departure("custom base exception"),
        "memory": lambda: MemoryError("pretend we ran out"),
        "str-not-text": StrNotText,
        "unpicklable-exc": lambda: Unpicklable("cannot pickle me"),
        "unpicklable-args": lambda: ValueError("a lock in args", threading.Lock()),
        "huge-exc": lambda: ValueError("y" * 1_000_000),
    }
    if how in raises:
        raise raises[how]()
    if how == "recursion":
        return _recurse(0)
    returns: dict[str, Any] = {
        "ret-lambda": lambda: (lambda: 1),
        "ret-object": object,
        "ret-lock": threading.Lock,
        "ret-5mb": lambda: "z" * 5_000_000,
        "ret-surrogate": lambda: "bad \udce9 name",
        "ret-nul": lambda: "a NUL \x00 here",
        "ret-bytes": lambda: b"\xff\xfe raw",
    }
    return returns[how]()


def make_app(prefix: str, **settings: Any) -> Celery:
    # PLUS_TEST_BROKER swaps the durable store (set per test by conftest.py's broker_url).
    broker = os.environ.get("PLUS_TEST_BROKER", f"plus+{REDIS_URL}")
    app = Celery("proj", broker=broker, backend=RESULT_URL, set_as_current=False)
    app.conf.update(
        plus_key_prefix=prefix,
        plus_pg_schema=pg_schema(prefix),
        plus_visibility_timeout=float(os.environ.get("PLUS_TEST_VT", "5")),
        # Unset: a third of the visibility timeout (the default).
        plus_heartbeat_interval=(float(os.environ["PLUS_TEST_HEARTBEAT"])
                                 if os.environ.get("PLUS_TEST_HEARTBEAT") else None),
        plus_unique_backstop=float(os.environ.get("PLUS_TEST_BACKSTOP", "86400")),
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
        """Publishes first (the pool process opens its own broker connection), then sleeps;
        a second run of ``n`` (its first run's process was killed) returns at once, so runs
        brought back by a kill do not take the pool's processes from later work."""
        mark.delay(-n - 1)
        slept_before = any(e["n"] == n for e in events(prefix, "sleeping"))
        record(prefix, "sleeping", n=n)
        if not slept_before:
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

    @app.task(name="proj.replaced_by_canvas", bind=True)
    def replaced_by_canvas(self: Any, x: int, y: int, how: str) -> Any:
        """Replaces itself with a canvas whose last part inherits this task's id (a chain's
        last step, or a group's accumulating chord body), published by another task."""
        record(prefix, "replaced", id=self.request.id)
        if how == "chain":
            raise self.replace(add.s(x, y) | add.s(10))
        raise self.replace(group(add.s(x, y), add.s(y, x)))

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

    # -- fenced continuations, odd failures, holds (test_fences.py) -------------------------
    @app.task(name="proj.x_one_at_a_time", bind=True, concurrency=1, max_retries=3)
    def one_at_a_time(self: Any, n: str, first_seconds: float, seconds: float) -> str:
        """Runs alone in its group. Job "A"'s first execution sleeps ``first_seconds`` and
        then retries (late, if its worker was frozen meanwhile); any other runs ``seconds``."""
        execution = counter.incr(f"{prefix}:executions:{n}")
        record(prefix, "start", n=n, execution=execution, retries=self.request.retries)
        if n == "A" and execution == 1:
            time.sleep(first_seconds)
            record(prefix, "retrying", n=n, execution=execution)
            raise self.retry(countdown=0.2)
        time.sleep(seconds)
        record(prefix, "end", n=n, execution=execution)
        return n

    @app.task(name="proj.fail_with")
    def fail_with(message: str) -> None:
        """Fails with ``message`` (a JSON-safe spelling: "<sur>" is a lone surrogate, "<nul>"
        a NUL, "<huge>" a megabyte); "<unprintable>" raises an exception whose ``__str__``
        and ``__repr__`` raise."""
        if message == "<unprintable>":
            raise Unprintable()
        text = (message.replace("<sur>", "\udce9").replace("<nul>", "\x00")
                .replace("<huge>", "x" * 1_000_000))
        record(prefix, "fail_with", message=message)
        raise ValueError(f"cannot open {text}")

    @app.task(name="proj.exit_with", max_deliveries=2)
    def exit_with(how: str) -> None:
        """Raises what ends a process: SystemExit ("exit") or KeyboardInterrupt."""
        record(prefix, "exit_with", how=how)
        if how == "exit":
            raise SystemExit(3)
        raise KeyboardInterrupt()

    @app.task(name="proj.x_key_changer", bind=True, unique_by=["key"])
    def key_changer(self: Any, key: str, how: str) -> str:
        """Continues itself under another unique key: Task.replace or retry(args=...)."""
        record(prefix, "key_changer", key=key, how=how)
        if key.endswith("-2"):
            return key
        if how == "replace":
            raise self.replace(key_target.s(key + "-2"))
        raise self.retry(args=(key + "-2", how), countdown=0.1)

    @app.task(name="proj.x_key_target", unique_by=["key"])
    def key_target(key: str) -> str:
        record(prefix, "key_target", key=key)
        return key

    @app.task(name="proj.x_early_retry", bind=True, acks_late=False, max_retries=3)
    def x_early_retry(self: Any, n: int) -> int:
        """Acked before it runs (early ack), then retries once: its retry starts it anew."""
        record(prefix, "early", n=n, retries=self.request.retries)
        if self.request.retries == 0:
            raise self.retry(countdown=0.1)
        return n

    @app.task(name="proj.x_early_long", acks_late=False)
    def x_early_long(seconds: float) -> float:
        """Acked as it is received, then runs for longer than the lease."""
        record(prefix, "early_long", seconds=seconds)
        time.sleep(seconds)
        return seconds

    @app.task(name="proj.x_retry_and_go_on", bind=True, max_retries=1)
    def x_retry_and_go_on(self: Any, seconds: float) -> str:
        """``self.retry(throw=False)``, then more work: Celery lets the run go on."""
        record(prefix, "go_on", retries=self.request.retries, at="start")
        if self.request.retries == 0:
            self.retry(countdown=60, throw=False)
            time.sleep(seconds)
            record(prefix, "go_on", retries=0, at="end")
            return "went on"
        return "retried"

    @app.task(name="proj.x_retry_elsewhere", bind=True, max_retries=1)
    def x_retry_elsewhere(self: Any) -> str:
        """Retries into queue ``reports`` (``self.retry(queue=...)``)."""
        record(prefix, "elsewhere", retries=self.request.retries,
               queue=(self.request.delivery_info or {}).get("routing_key"))
        if self.request.retries == 0:
            raise self.retry(queue="reports", countdown=0)
        return "moved"

    @app.task(name="proj.x_two_fields", unique_by=["a", "b"])
    def x_two_fields(a: Any, b: Any) -> int:
        record(prefix, "fields", size=len(json_dumps([a, b])))
        return 2

    @app.task(name="proj.x_three_fields", unique_by=["a", "b", "c"], unique_window="pending")
    def x_three_fields(a: Any, b: Any, c: Any = None) -> int:
        record(prefix, "fields", size=len(json_dumps([a, b, c])))
        return 3

    @app.task(name="proj.x_outcome", max_deliveries=2)
    def x_outcome(how: str) -> Any:
        record(prefix, "outcome", how=how)
        return outcome(how)

    return app


def json_dumps(value: Any) -> str:
    return json.dumps(value)


# PLUS_TEST_COMPACT=0: the hash Redis record layout (plus_redis_compact_records off; the
# default, 1, is the compact layout).
app = make_app(os.environ.get("PLUS_TEST_PREFIX", "plus-e2e"),
               **({"plus_redis_compact_records": False}
                  if os.environ.get("PLUS_TEST_COMPACT") == "0" else {}))
