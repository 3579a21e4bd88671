"""Helpers of the conformance suite, written only against the ``Backend`` interface."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from celery_plus.model.store import (
    Backend,
    ClaimResult,
    JobRecord,
    NewJob,
    PublishOutcome,
    Settle,
)
from tests.support import wait_until

__all__ = ["Q", "claim", "history", "ids", "maintain", "publish", "record", "wait_until"]

#: The queue tests publish to unless they say otherwise.
Q = "jobs"


def publish(backend: Backend, job_id: str, message: str | None = None,
            **fields: Any) -> PublishOutcome:
    """Publish one job on :data:`Q` (message ``msg-<id>`` unless given)."""
    fields.setdefault("queue", Q)
    return backend.publish(NewJob(id=job_id, message=message or f"msg-{job_id}", **fields))


def claim(backend: Backend, max_jobs: int = 10, worker: str = "w1",
          queues: Sequence[str] = (Q,), settles: Sequence[Settle] = ()) -> ClaimResult:
    return backend.claim(list(queues), worker, max_jobs, settles)


def ids(result: ClaimResult) -> list[str]:
    """The claimed job ids, in claim order."""
    return [c.job_id for c in result.claims]


def record(backend: Backend, job_id: str) -> JobRecord:
    """The job record (a test that finds none fails)."""
    found = backend.record(job_id)
    assert found is not None, f"no record of job {job_id!r}"
    return found


def history(backend: Backend, job_id: str) -> list[dict[str, Any]]:
    """The job's per-attempt history."""
    return list(record(backend, job_id).history)


def maintain(backend: Backend) -> None:
    """Run one maintenance pass (waiting out the 1 ms throttle of the previous one)."""
    wait_until(lambda: backend.maintain("w"), timeout=10, message="maintenance lock")
