"""The worker side of ``test_observability.py``: proj's app with the observability a Celery
user wires up — Sentry's Celery integration (``sentry-sdk``, real) and OpenTelemetry's
Celery instrumentation with celery-plus's attributes — each reporting into Redis under the
test's prefix (``{prefix}:sentry``, ``{prefix}:spans``), the test's collector.

The publishes to observe are made in the worker too (``observe.publish_twice``), so the
test process never instruments Celery's process-wide signals.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Sequence
from typing import Any

import redis
import sentry_sdk
from opentelemetry.instrumentation.celery import CeleryInstrumentor
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
from sentry_sdk.envelope import Envelope
from sentry_sdk.integrations.celery import CeleryIntegration
from sentry_sdk.transport import Transport

from celery_plus.contrib import opentelemetry as plus_otel
from tests.deploy.e2e import proj

PREFIX = os.environ.get("PLUS_TEST_PREFIX", "plus-e2e")
_clients: dict[int, redis.Redis] = {}


def _redis() -> redis.Redis:
    """This process's client (a prefork pool process must not share its parent's socket)."""
    pid = os.getpid()
    if pid not in _clients:
        _clients[pid] = redis.Redis.from_url(proj.REDIS_URL)
    return _clients[pid]


class RedisSpanExporter(SpanExporter):
    """Each finished span as JSON (name, kind, trace, attributes) on ``{prefix}:spans``."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        for span in spans:
            context = span.get_span_context()
            _redis().rpush(f"{PREFIX}:spans", json.dumps({
                "name": span.name, "kind": span.kind.name,
                "trace": f"{context.trace_id:032x}" if context else "",
                "attributes": dict(span.attributes or {})}, default=str))
        return SpanExportResult.SUCCESS


class RedisSentryTransport(Transport):
    """Sentry's envelopes, kept: each event item's payload on ``{prefix}:sentry``."""

    def capture_envelope(self, envelope: Envelope) -> None:
        for item in envelope.items:
            if item.type == "event":
                _redis().rpush(f"{PREFIX}:sentry", item.payload.get_bytes())


sentry_sdk.init(dsn="http://public@127.0.0.1:9/1", transport=RedisSentryTransport,
                integrations=[CeleryIntegration()])
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(RedisSpanExporter()))
CeleryInstrumentor().instrument(tracer_provider=provider)
plus_otel.instrument()

app = proj.make_app(PREFIX)


@app.task(name="observe.unique", unique=True)
def unique(key: str) -> str:
    return key


@app.task(name="observe.publish_twice")
def publish_twice(key: str) -> list[Any]:
    """Publish ``observe.unique(key)`` twice with a countdown: the second coalesces."""
    first = unique.apply_async((key,), countdown=60)
    second = unique.apply_async((key,), countdown=60)
    return [first.id, second.id, second.deduplicated]


@app.task(name="observe.doomed", autoretry_for=(ValueError,), max_retries=2,
          default_retry_delay=0)
def doomed(key: str) -> None:
    """Fails on every delivery: two retries, then the final failure."""
    raise ValueError(f"doomed {key}")


@app.task(name="observe.dies_then_fails")
def dies_then_fails(key: str) -> None:
    """Its first delivery's process dies (SIGKILL); the delivery after fails for good."""
    if _redis().incr(f"{PREFIX}:dies:{key}") == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    raise ValueError(f"failed after a lost run {key}")

