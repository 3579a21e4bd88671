"""The end-to-end project of issue 12's drop-in tests: ``proj`` plus the tasks real projects
write that the plain test project lacks — a shared ``celery.Task`` base class, unique and
concurrency-limited canvas members, a CPU-bound task longer than the lease.

Workers load ``tests.deploy.e2e.dropin_proj``
(``start_worker(app="tests.deploy.e2e.dropin_proj")``).
"""

from __future__ import annotations

import json
import os
import ssl
import time
from typing import Any

import celery

from celery_plus import Celery

from . import proj
from .proj import record


class AuditedTask(celery.Task):
    """A project's shared base class, written against plain Celery."""

    def on_failure(self, exc: BaseException, task_id: str, args: Any, kwargs: Any,
                   einfo: Any) -> None:
        record(os.environ.get("PLUS_TEST_PREFIX", ""), "base_on_failure", id=task_id)


def connection_settings() -> dict[str, Any]:
    """Broker connection settings from the environment (TLS, transport options)."""
    found: dict[str, Any] = {}
    if os.environ.get("PLUS_TEST_SSL_CA"):
        found["broker_use_ssl"] = {"ssl_cert_reqs": ssl.CERT_REQUIRED,
                                   "ssl_ca_certs": os.environ["PLUS_TEST_SSL_CA"]}
    if os.environ.get("PLUS_TEST_RESULT_BACKEND"):
        found["result_backend"] = os.environ["PLUS_TEST_RESULT_BACKEND"]
    if os.environ.get("PLUS_TEST_TRANSPORT_OPTIONS"):
        found["broker_transport_options"] = json.loads(os.environ["PLUS_TEST_TRANSPORT_OPTIONS"])
    return found


def make_app(prefix: str, **settings: Any) -> Celery:
    app = proj.make_app(prefix, **{**connection_settings(), **settings})

    @app.task(name="dropin.based_unique", base=AuditedTask, unique=True)
    def based_unique(key: str, seconds: float) -> str:
        record(prefix, "start", key=key)
        time.sleep(seconds)
        return key

    @app.task(name="dropin.based_fail", base=AuditedTask, max_deliveries=2)
    def based_fail(message: str) -> None:
        raise ValueError(message)

    @app.task(name="dropin.uniq", unique=True)
    def uniq(n: int, seconds: float = 0.5) -> int:
        record(prefix, "uniq", n=n)
        time.sleep(seconds)
        return n * 10

    @app.task(name="dropin.uniq_fail", unique=True)
    def uniq_fail(n: int, seconds: float = 0.5) -> int:
        record(prefix, "uniq_fail", n=n)
        time.sleep(seconds)
        raise ValueError(f"uniq_fail {n}")

    @app.task(name="dropin.uniq_quiet", unique=True, ignore_result=True)
    def uniq_quiet(n: int) -> int:
        record(prefix, "uniq_quiet", n=n)
        return n * 10

    @app.task(name="dropin.limited", concurrency=1)
    def limited(n: int, seconds: float = 0.3) -> int:
        record(prefix, "limited", n=n)
        time.sleep(seconds)
        return n

    @app.task(name="dropin.uniq_by", unique_by=["n"])
    def uniq_by(n: int, tag: str, seconds: float = 0.5) -> int:
        record(prefix, "uniq_by", n=n, tag=tag)
        time.sleep(seconds)
        return n * 10

    @app.task(name="dropin.uniq_sum", unique=True)
    def uniq_sum(numbers: list[int]) -> int:
        record(prefix, "uniq_sum", numbers=numbers)
        time.sleep(0.3)
        return sum(numbers)

    @app.task(name="dropin.replaced_by_uniq", bind=True)
    def replaced_by_uniq(self: Any, n: int) -> Any:
        record(prefix, "replaced", n=n)
        return self.replace(uniq.s(n))

    @app.task(name="dropin.uniq_replacing", bind=True, unique=True)
    def uniq_replacing(self: Any, n: int) -> Any:
        record(prefix, "uniq_replacing", n=n)
        return self.replace(app.tasks["proj.add"].s(n, 1))

    @app.task(name="dropin.limited_replacing", bind=True, concurrency=1)
    def limited_replacing(self: Any, n: int) -> Any:
        record(prefix, "limited_replacing", n=n)
        return self.replace(app.tasks["dropin.limited"].s(n, 0.1))

    @app.task(name="dropin.limited_by", concurrency=1, concurrency_key="key")
    def limited_by(key: str, n: int, seconds: float = 0.2) -> int:
        record(prefix, "limited_by", key=key, n=n)
        time.sleep(seconds)
        return n

    @app.task(name="dropin.crunch")
    def crunch(seconds: float) -> int:
        """CPU-bound: never yields to an event loop for ``seconds``."""
        record(prefix, "crunch_start")
        deadline = time.monotonic() + seconds
        spins = 0
        while time.monotonic() < deadline:
            spins += 1
        record(prefix, "crunch_end")
        return spins

    return app


app = make_app(os.environ.get("PLUS_TEST_PREFIX", "plus-e2e"))
