"""Conformance: scheduling (DESIGN §3.2 ETA/countdown).

Rules: a job with an eta in the future waits in the store (``scheduled``) and is claimable
once due, never before; an eta in the past is enqueued at once; a claim reports when the next
scheduled job is due; maintenance promotes due scheduled jobs to their queue.
"""

from __future__ import annotations

from celery_plus.transport.backend import Backend

from .support import Q, claim, ids, maintain, publish, record, wait_until


def test_an_eta_job_stays_scheduled_until_due_then_is_claimable(backend: Backend) -> None:
    due = backend.now_ms() + 2_000
    out = publish(backend, "later", eta_ms=due)
    assert out.accepted and out.state == "scheduled"
    publish(backend, "now")
    rec = record(backend, "later")
    assert rec["st"] == "scheduled" and rec["due"] == str(due)
    assert backend.ids_in_state("scheduled") == ["later"]
    assert backend.size(Q) == 1
    assert ids(claim(backend)) == ["now"]
    got = wait_until(lambda: ids(claim(backend)), timeout=15, message="due job claimable")
    assert got == ["later"]
    assert int(record(backend, "later")["start"]) >= due, "claimed before it was due"
    assert backend.ids_in_state("scheduled") == []


def test_an_eta_in_the_past_is_enqueued_at_once(backend: Backend) -> None:
    out = publish(backend, "past", eta_ms=backend.now_ms() - 1_000)
    assert out.accepted and out.state == "enqueued"
    assert ids(claim(backend)) == ["past"]


def test_a_claim_reports_when_the_next_scheduled_job_is_due(backend: Backend) -> None:
    assert claim(backend).next_due is None
    publish(backend, "later", eta_ms=backend.now_ms() + 60_000)
    publish(backend, "sooner", eta_ms=backend.now_ms() + 30_000)
    next_due = claim(backend).next_due
    assert next_due is not None and 20 < next_due <= 30


def test_maintenance_promotes_due_scheduled_jobs(backend: Backend) -> None:
    publish(backend, "a", eta_ms=backend.now_ms() + 300)
    assert record(backend, "a")["st"] == "scheduled"

    def promoted() -> bool:
        maintain(backend)
        return record(backend, "a")["st"] == "enqueued"

    wait_until(promoted, timeout=10, message="promotion")
    assert backend.ids_in_state("enqueued") == ["a"] and backend.size(Q) == 1
