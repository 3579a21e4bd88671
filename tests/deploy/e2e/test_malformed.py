"""Acceptance line 8 of the foundation issue: malformed messages.

8. "Garbage pushed into the store (invalid JSON, unknown content type, missing headers) is
   dead-lettered with its raw bytes and the worker keeps serving."

Garbage is stored with the store backend's ``push_raw`` (no checks); the well-formed variants are a
real envelope captured from the store (a task published to a queue no worker consumes) and
then altered. Each one must end as a dead letter with reason "malformed message", its ``msg``
field exactly the bytes pushed, and the same worker must still run a normal task afterwards.
Runs on each durable store (``broker_kind``: Redis, SQLite and PostgreSQL).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from typing import Any

import pytest

from celery_plus.model.store import Backend
from tests.inspectors import inspector_for

from .conftest import Worker, wait_until

MALFORMED = "malformed message"
CAPTURE_QUEUE = "capture-only"


def _captured_envelope(client: Any, view: Backend) -> dict[str, Any]:
    """A real kombu envelope as celery-plus stored it (never consumed: no worker on the queue)."""
    result = client.tasks["proj.add"].apply_async((1, 2), queue=CAPTURE_QUEUE)
    raw = view.raw_message(result.id)
    assert raw, "published task has no stored message"
    assert (inspector_for(view).job(result.id) or {}).get("msg") == raw.decode()
    envelope: dict[str, Any] = json.loads(raw)
    assert envelope["headers"]["task"] == "proj.add"
    assert envelope["content-type"] == "application/json"
    assert envelope["properties"]["body_encoding"] == "base64"
    return envelope


def _as_job(envelope: dict[str, Any], job_id: str) -> dict[str, Any]:
    out = json.loads(json.dumps(envelope))
    out["headers"]["id"] = job_id
    out["headers"]["root_id"] = job_id
    out["properties"]["correlation_id"] = job_id
    return out


def _garbage(envelope: dict[str, Any], prefix: str) -> dict[str, bytes]:
    """The malformed messages, by case name (job id = f"{prefix}-{case}")."""
    cases: dict[str, bytes] = {}

    def job(case: str) -> tuple[str, dict[str, Any]]:
        job_id = f"{prefix}-{case}"
        return job_id, _as_job(envelope, job_id)

    cases["invalid-json"] = b'{"body": "eyJ9", "headers": {"task": "proj.add", '
    cases["invalid-utf8"] = b"\xff\xfe\x00garbage\x80"
    cases["not-an-envelope"] = b'["a", "json", "list"]'

    _, msg = job("unknown-content-type")
    msg["content-type"] = "application/x-nope"
    cases["unknown-content-type"] = json.dumps(msg).encode()

    _, msg = job("no-task-header")
    del msg["headers"]["task"]
    cases["no-task-header"] = json.dumps(msg).encode()

    _, msg = job("no-headers")
    del msg["headers"]
    cases["no-headers"] = json.dumps(msg).encode()

    _, msg = job("bad-base64-body")
    msg["body"] = "!!! not base64 at all ~"
    cases["bad-base64-body"] = json.dumps(msg).encode()

    _, msg = job("body-not-json")
    msg["body"] = base64.b64encode(b"{this is not json").decode()
    cases["body-not-json"] = json.dumps(msg).encode()
    return cases


@pytest.mark.parametrize("pool", ["solo", "prefork"])
def test_garbage_is_dead_lettered_with_raw_bytes_and_worker_keeps_serving(
    client: Any, start_worker: Callable[..., Worker], prefix: str, view: Backend,
    pool: str,
) -> None:
    inspect = inspector_for(view)
    envelope = _captured_envelope(client, view)
    cases = _garbage(envelope, prefix)
    worker = start_worker(pool=pool, concurrency=1)
    # A well-formed task first: the garbage must not be what makes the worker work.
    assert client.tasks["proj.add"].delay(20, 1).get(timeout=20) == 21
    for case, raw in cases.items():
        view.push_raw("celery", f"{prefix}-{case}", raw)

    def states() -> dict[str, str | None]:
        return {case: (inspect.job(f"{prefix}-{case}") or {}).get("st") for case in cases}

    wait_until(lambda: all(s in ("failed", "completed") for s in states().values()),
               timeout=30, message=f"every malformed message settled: {states()}")

    dead = inspect.ids_in_state("failed")
    for case, raw in cases.items():
        job_id = f"{prefix}-{case}"
        record = inspect.job(job_id) or {}
        assert record.get("st") == "failed", (case, record)
        assert record["reason"] == MALFORMED, (case, record)
        assert view.raw_message(job_id) == raw, (case, view.raw_message(job_id), raw)
        assert job_id in dead, case
        assert inspect.lease_deadline(job_id) is None, case
        assert record.get("emsg") or record.get("etype"), (case, record)

    # The same worker process keeps serving.
    assert worker.proc.poll() is None, worker.log()
    assert client.tasks["proj.add"].delay(2, 3).get(timeout=20) == 5
    # And the captured original, left untouched on its own queue, is still intact.
    assert view.size(CAPTURE_QUEUE) == 1
