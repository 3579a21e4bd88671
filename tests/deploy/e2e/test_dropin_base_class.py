"""Defect 4 of issue 12: ``@app.task(base=MyBase, unique=True)`` with ``MyBase(celery.Task)``.

A project's shared base class derives from ``celery.Task``; the task must still coalesce
duplicates, and its failure must be dead-lettered (not recorded as completed) — with the
base class's own hooks still running. On every store, with a real worker.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celery_plus.model.store import Backend
from tests.inspectors import inspector_for

from . import dropin_fixtures
from .conftest import Worker, wait_until
from .proj import events

APP = dropin_fixtures.APP
client = dropin_fixtures.client  # the drop-in project's client app


def test_a_celery_task_base_keeps_uniqueness_and_dead_letters(
        client: Any, start_worker: Callable[..., Worker], prefix: str, view: Backend) -> None:
    start_worker(app=APP)
    first = client.tasks["dropin.based_unique"].delay("k", 1.0)
    again = client.tasks["dropin.based_unique"].delay("k", 1.0)
    assert again.deduplicated is True and again.id == first.id
    assert first.get(timeout=30) == "k"
    assert len(events(prefix, "start")) == 1

    failed = client.tasks["dropin.based_fail"].delay("boom")
    wait_until(lambda: (inspector_for(view).job(failed.id) or {}).get("st") == "failed", timeout=30,
               message="failure dead-lettered")
    record = inspector_for(view).job(failed.id) or {}
    assert record["reason"] == "task failed", record
    assert "ValueError" in record.get("exc_type", "") + record.get("hist", ""), record
    assert [e["id"] for e in events(prefix, "base_on_failure")] == [failed.id]
