"""``migrate-queue --back``: the ``eta`` header a scheduled job's message is published with."""

from __future__ import annotations

from celery_plus.model.admin import JobSummary
from celery_plus.queue_migration.back import eta_header


def row(state: str, due_ms: int) -> JobSummary:
    return JobSummary(id="j", state=state, name="t", queue="q", at_ms=0, enqueued_ms=0,
                      due_ms=due_ms, deliveries=0)


def test_a_scheduled_job_without_eta_gets_its_due_time() -> None:
    assert eta_header({"headers": {"eta": None}}, row("scheduled", 1_700_000_000_500)) == {
        "eta": "2023-11-14T22:13:20.500000+00:00"}


def test_an_eta_the_message_has_is_kept() -> None:
    message = {"headers": {"eta": "2030-01-01T00:00:00+00:00"}}
    assert eta_header(message, row("scheduled", 1_700_000_000_000)) == {}


def test_a_waiting_job_gets_no_eta() -> None:
    assert eta_header({"headers": {}}, row("enqueued", 1_700_000_000_000)) == {}
