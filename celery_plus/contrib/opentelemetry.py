"""OpenTelemetry: celery-plus's facts on the spans of OpenTelemetry's Celery instrumentation.

``opentelemetry-instrumentation-celery`` makes a producer span per publish
(``apply_async/<task>``) and a consumer span per run (``run/<task>``). :func:`instrument`
adds to them what only celery-plus knows::

    from opentelemetry.instrumentation.celery import CeleryInstrumentor
    from celery_plus.contrib import opentelemetry as plus_otel

    CeleryInstrumentor().instrument()
    plus_otel.instrument()

* the publish span: :data:`DEDUPLICATED` (the store coalesced this publish into a job holding
  its unique key, or fenced it) and :data:`HOLDER_ID` (that job's id);
* the run span: :data:`LEASE_TOKEN` (the delivery's lease token: it grows with each claim of
  the job, so a job run again after a lease recovery shows a higher one) and
  :data:`REDELIVERED` (this is not the job's first delivery).

The spans are found by OpenTelemetry's own bookkeeping (task and id), not as "the current
span", so the order in which the two ``instrument()`` calls connect their signal handlers
does not matter. Needs ``opentelemetry-instrumentation-celery``.
"""

from __future__ import annotations

from typing import Any

from celery import current_app, signals
from opentelemetry.instrumentation.celery import utils

from celery_plus import signals as plus_signals
from celery_plus.leases.tokens import LEASE_HEADER

DEDUPLICATED = "celery_plus.deduplicated"
HOLDER_ID = "celery_plus.holder_id"
LEASE_TOKEN = "celery_plus.lease_token"
REDELIVERED = "celery_plus.redelivered"


def _recording_span(task: Any, task_id: Any, *, is_publish: bool) -> Any:
    """The instrumentation's live span of ``task_id`` (publish or run), or None."""
    if task is None or not task_id:
        return None
    context = utils.retrieve_context(task, task_id, is_publish=is_publish)
    span = context[0] if context else None
    return span if span is not None and span.is_recording() else None


def _on_published(sender: Any = None, task_id: Any = None, deduplicated: bool = False,
                  holder_id: Any = None, **_: Any) -> None:
    task = current_app.tasks.get(sender) if isinstance(sender, str) else None
    span = _recording_span(task, task_id, is_publish=True)
    if span is None:
        return
    span.set_attribute(DEDUPLICATED, bool(deduplicated))
    if deduplicated and holder_id:
        span.set_attribute(HOLDER_ID, str(holder_id))


def _on_run(task: Any = None, task_id: Any = None, **_: Any) -> None:
    """Sent at prerun and postrun: whichever finds the run span live tags it (the
    instrumentation's prerun handler may come before or after this one)."""
    span = _recording_span(task, task_id, is_publish=False)
    if span is None:
        return
    request = task.request
    token = getattr(request, LEASE_HEADER, None)
    if token:
        span.set_attribute(LEASE_TOKEN, int(token))
    delivery = getattr(request, "delivery_info", None) or {}
    span.set_attribute(REDELIVERED, bool(delivery.get("redelivered")))


def instrument() -> None:
    """Tag the instrumentation's spans with celery-plus's attributes (idempotent)."""
    plus_signals.task_published.connect(_on_published, weak=False,
                                        dispatch_uid="celery_plus.otel.published")
    signals.task_prerun.connect(_on_run, weak=False, dispatch_uid="celery_plus.otel.prerun")
    signals.task_postrun.connect(_on_run, weak=False, dispatch_uid="celery_plus.otel.postrun")


def uninstrument() -> None:
    """Undo :func:`instrument`."""
    plus_signals.task_published.disconnect(_on_published,
                                           dispatch_uid="celery_plus.otel.published")
    signals.task_prerun.disconnect(_on_run, dispatch_uid="celery_plus.otel.prerun")
    signals.task_postrun.disconnect(_on_run, dispatch_uid="celery_plus.otel.postrun")
