"""Conformance: scheduling (DESIGN §3.2 ETA/countdown).

Rules: a job with an eta in the future waits in the store (``scheduled``) and is claimable
once due, never before; an eta in the past is enqueued at once; a claim reports when the next
scheduled job is due; maintenance promotes due scheduled jobs to their queue; the scheduled
jobs of given queues can be listed with their messages, soonest first (``inspect scheduled``).
"""

from __future__ import annotations

from celery_plus.model.store import Backend
from tests.inspectors import Inspector

from .support import Q, claim, ids, maintain, publish, record, wait_until


def test_an_eta_job_stays_scheduled_until_due_then_is_claimable(backend: Backend,
                                                                inspect: Inspector) -> None:
    due = backend.now_ms() + 2_000
    out = publish(backend, "later", eta_ms=due)
    assert out.accepted and out.state == "scheduled"
    publish(backend, "now")
    rec = record(backend, "later")
    assert rec.state == "scheduled" and rec.due_ms == due
    assert inspect.ids_in_state("scheduled") == ["later"]
    assert backend.size(Q) == 1
    assert ids(claim(backend)) == ["now"]
    got = wait_until(lambda: ids(claim(backend)), timeout=15, message="due job claimable")
    assert got == ["later"]
    assert record(backend, "later").started_ms >= due, "claimed before it was due"
    assert inspect.ids_in_state("scheduled") == []


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


def test_maintenance_promotes_due_scheduled_jobs(backend: Backend, inspect: Inspector) -> None:
    publish(backend, "a", eta_ms=backend.now_ms() + 300)
    assert record(backend, "a").state == "scheduled"

    def promoted() -> bool:
        maintain(backend)
        return record(backend, "a").state == "enqueued"

    wait_until(promoted, timeout=10, message="promotion")
    assert inspect.ids_in_state("enqueued") == ["a"] and backend.size(Q) == 1


def test_the_scheduled_jobs_of_given_queues_are_listed_soonest_first(backend: Backend) -> None:
    now = backend.now_ms()
    publish(backend, "b-later", message="msg-b \u00e9", eta_ms=now + 90_000)
    publish(backend, "a-sooner", eta_ms=now + 30_000)
    publish(backend, "tie-2", eta_ms=now + 60_000)
    publish(backend, "tie-1", eta_ms=now + 60_000)
    publish(backend, "elsewhere", eta_ms=now + 10_000, queue="other")
    publish(backend, "ready")
    listed = backend.scheduled_jobs([Q])
    assert [j.job_id for j in listed] == ["a-sooner", "tie-1", "tie-2", "b-later"]
    assert [j.due_ms for j in listed] == [now + 30_000, now + 60_000, now + 60_000, now + 90_000]
    assert {j.queue for j in listed} == {Q}
    message = listed[-1].message
    assert (message.decode() if isinstance(message, bytes) else message) == "msg-b \u00e9"
    assert [j.job_id for j in backend.scheduled_jobs([Q, "other"], limit=2)] == [
        "elsewhere", "a-sooner"]
    assert backend.scheduled_jobs(["nothing-here"]) == []
    assert backend.scheduled_jobs([]) == []
