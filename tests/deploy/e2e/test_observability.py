"""What a Celery user's observability stack sees on a plus store, with real workers:
OpenTelemetry's Celery instrumentation (spans for publish and run, celery-plus's
deduplication and lease as attributes), Sentry's Celery integration (a failing task reported
once, not once per delivery) and Celery's task events, the feed of ``celery events`` and
Flower. The worker's app is ``observe_proj.py``; this process never instruments Celery.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from celery_plus.contrib import opentelemetry as plus_otel

from .conftest import wait_until
from .proj import REDIS_URL

OBSERVED = "tests.deploy.e2e.observe_proj"


def _reported(prefix: str, kind: str) -> list[dict[str, Any]]:
    """What the worker's collector kept: ``spans`` or ``sentry`` (events)."""
    client = redis.Redis.from_url(REDIS_URL)
    raw = client.lrange(f"{prefix}:{kind}", 0, -1)
    client.close()
    return [json.loads(item) for item in raw]


def _named(spans: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [span for span in spans if span["name"] == name]


@contextlib.contextmanager
def _receiving_events(client: Any) -> Iterator[list[dict[str, Any]]]:
    """A ``celery events``-style receiver (``app.events.Receiver``) in a thread: the events
    it got so far, once its queue is bound (``wakeup``: the workers answer with a heartbeat
    as it starts consuming)."""
    seen: list[dict[str, Any]] = []
    with client.connection_for_read() as conn:
        receiver = client.events.Receiver(conn, handlers={"*": seen.append})
        thread = threading.Thread(target=receiver.capture,
                                  kwargs={"limit": None, "timeout": 60, "wakeup": True},
                                  daemon=True)
        thread.start()
        try:
            wait_until(lambda: any(e["type"] == "worker-heartbeat" for e in seen),
                       message="a worker heartbeat (the receiver is bound)")
            yield seen
        finally:
            receiver.should_stop = True
            thread.join(timeout=10)


def _check_publish_and_run_spans(client: Any, prefix: str) -> None:
    """The second publish of one unique job is tagged deduplicated, with the job holding the
    key; the run span carries the delivery's lease token."""
    first, second, deduplicated = client.send_task(
        "observe.publish_twice", ("k",)).get(timeout=20)
    assert deduplicated is True and second == first
    publishes = wait_until(
        lambda: len(found := _named(_reported(prefix, "spans"), "apply_async/observe.unique"))
        == 2 and found, message="two publish spans")
    assert [(s["kind"], s["attributes"].get(plus_otel.DEDUPLICATED)) for s in publishes] == [
        ("PRODUCER", False), ("PRODUCER", True)], publishes
    assert publishes[1]["attributes"][plus_otel.HOLDER_ID] == first
    # The run span is exported as it ends, which may be just after the result is stored.
    runs = wait_until(
        lambda: _named(_reported(prefix, "spans"), "run/observe.publish_twice"),
        message="the run span")
    assert len(runs) == 1 and runs[0]["kind"] == "CONSUMER", runs
    assert runs[0]["attributes"][plus_otel.LEASE_TOKEN] >= 1
    assert runs[0]["attributes"][plus_otel.REDELIVERED] is False
    # The publishes made by the task belong to its run's trace.
    assert {s["trace"] for s in publishes} == {runs[0]["trace"]}


def _check_one_sentry_report(client: Any, prefix: str, view: Any) -> None:
    """A task failing on each of its three deliveries (two retries): Sentry gets one report,
    of the final failure; each delivery's run span has a lease token of its own."""
    doomed = client.send_task("observe.doomed", ("d",))
    wait_until(lambda: (r := view.record(doomed.id)) is not None and r.state == "failed",
               message="the doomed job dead-lettered")
    runs = wait_until(lambda: len(found := _named(_reported(prefix, "spans"),
                                                   "run/observe.doomed")) == 3 and found,
                      message="three run spans of the doomed job")
    tokens = [span["attributes"][plus_otel.LEASE_TOKEN] for span in runs]
    assert tokens == sorted(set(tokens)), tokens
    reports = [event for event in _reported(prefix, "sentry")
               if event.get("tags", {}).get("celery_task_id") == doomed.id]
    assert len(reports) == 1, reports
    [exception] = reports[0]["exception"]["values"]
    assert exception["type"] == "ValueError" and exception["value"] == "doomed d", exception
    assert exception["mechanism"]["type"] == "celery"


def _check_task_events(client: Any, seen: list[dict[str, Any]], worker_name: str) -> None:
    """task-received, -started and -succeeded carry Celery's fields (Flower reads them)."""
    result = client.tasks["proj.add"].delay(2, 3)
    assert result.get(timeout=20) == 5
    wanted = ("task-received", "task-started", "task-succeeded")
    task_events = wait_until(
        lambda: (found := {e["type"]: e for e in list(seen) if e.get("uuid") == result.id})
        and all(kind in found for kind in wanted) and found,
        message="received, started and succeeded events")
    received, started, succeeded = (task_events[kind] for kind in wanted)
    assert {e["hostname"] for e in (received, started, succeeded)} == {worker_name}
    assert received["name"] == "proj.add" and received["args"] == "(2, 3)", received
    assert received["kwargs"] == "{}" and received["retries"] == 0, received
    assert received["root_id"] == result.id, received
    assert isinstance(started["pid"], int), started
    assert succeeded["result"] == "5" and succeeded["runtime"] >= 0, succeeded
    assert received["timestamp"] <= started["timestamp"] <= succeeded["timestamp"]


def test_opentelemetry_sentry_and_task_events_on_a_worker_of_a_plus_store(
        client, start_worker, prefix, view, broker_kind):
    """One worker (``-E``) for the three: a worker start is the cost of a deploy test."""
    start_worker("-E", app=OBSERVED)
    with _receiving_events(client) as seen:
        _check_publish_and_run_spans(client, prefix)
        _check_one_sentry_report(client, prefix, view)
        _check_task_events(client, seen, f"w0-{prefix}@{socket.gethostname()}")


@pytest.mark.long
def test_sentry_reports_a_job_whose_first_run_was_lost_once(client, start_worker, prefix, view,
                                                            broker_kind):
    """A prefork pool process dies under its job (SIGKILL); celery-plus delivers the job again
    and that run fails for good: Sentry has one report of the job, the final failure."""
    start_worker(app=OBSERVED, pool="prefork", concurrency=1)
    job = client.send_task("observe.dies_then_fails", ("l",))
    wait_until(lambda: (r := view.record(job.id)) is not None and r.state == "failed",
               timeout=60, message="the job dead-lettered after its second run")
    # Everything the worker's Sentry client sent (the worker logs the lost run's
    # WorkerLostError at ERROR; it is not reported).
    reports = _reported(prefix, "sentry")
    assert [(e["tags"].get("celery_task_id"), e["exception"]["values"][0]["type"])
            for e in reports] == [(job.id, "ValueError")], reports
