"""Conformance: the worker's start marks (docs/admin.md "Reserved and running").

Rules: a claim is ``running`` in the store from its claim on; its worker's heartbeats and its
settle carry a start mark at no extra store call. ``NOT_STARTED`` (its task has not started:
prefetched) shows the job as ``reserved``; ``n`` ms (its task started n ms ago) moves the job's
start to the store's now - n, never before the claim nor after now, once per claim (a later
mark changes nothing), and ends ``reserved``. A settle's ``run_ms`` does the same before the
claim ends, so runtime and wait figures start when the task did. No mark (a worker of an
earlier release) leaves the claim's time as the start, as before; a mark of a stale claim
changes nothing.
"""

from __future__ import annotations

from celery_plus.admin import Admin, admin_for
from celery_plus.model.admin import JobSummary
from celery_plus.model.store import NOT_STARTED, Backend, Settle, Verdict

from .support import claim, publish, record, wait_until


def _running_row(backend: Backend, job_id: str) -> JobSummary:
    with Admin(admin_for(backend)) as admin:
        rows = [r for r in admin.jobs("running").items if r.id == job_id]
    assert rows, f"{job_id} not listed as running"
    return rows[0]


def _later(backend: Backend, than_ms: int, by_ms: int = 30) -> None:
    wait_until(lambda: backend.now_ms() >= than_ms + by_ms, timeout=5,
               message="the store's clock to move on")


def test_a_claim_not_started_is_reserved_until_a_start_mark(backend: Backend) -> None:
    publish(backend, "a")
    got = claim(backend).claims[0]
    claimed = record(backend, "a")
    assert not claimed.reserved and not _running_row(backend, "a").reserved
    assert backend.heartbeat([("a", got.token)], [NOT_STARTED]) == [Verdict.RENEWED]
    rec = record(backend, "a")
    assert rec.reserved and rec.state == "running"
    assert rec.started_ms == claimed.started_ms, "a reserved job keeps its claim time"
    assert _running_row(backend, "a").reserved is True
    with Admin(admin_for(backend)) as admin:
        assert admin.show("a").summary.reserved
    _later(backend, claimed.started_ms)
    assert backend.heartbeat([("a", got.token)], [0]) == [Verdict.RENEWED]
    started = record(backend, "a")
    assert not started.reserved
    assert started.started_ms >= claimed.started_ms + 30, "the start moved to the real start"
    assert _running_row(backend, "a").reserved is False


def test_a_start_mark_is_applied_once_per_claim_and_never_before_the_claim(
        backend: Backend) -> None:
    publish(backend, "a")
    got = claim(backend).claims[0]
    claimed = record(backend, "a").started_ms
    backend.heartbeat([("a", got.token)], [10**9])  # "started" before its claim: clamped
    assert record(backend, "a").started_ms == claimed
    _later(backend, claimed)
    backend.heartbeat([("a", got.token)], [0])
    backend.heartbeat([("a", got.token)], [NOT_STARTED])
    rec = record(backend, "a")
    assert rec.started_ms == claimed and not rec.reserved, "a second mark changed the start"


def test_a_settle_carries_the_run_time(backend: Backend) -> None:
    publish(backend, "a")
    publish(backend, "b")
    got = {c.job_id: c for c in claim(backend).claims}
    claimed = {i: record(backend, i).started_ms for i in "ab"}
    backend.heartbeat([("a", got["a"].token), ("b", got["b"].token)],
                      [NOT_STARTED, NOT_STARTED])
    _later(backend, max(claimed.values()), by_ms=60)
    backend.settle([Settle("a", got["a"].token, "ack", run_ms=0),
                    Settle("b", got["b"].token, "fail", {"exc_type": "E"}, run_ms=None)])
    a, b = record(backend, "a"), record(backend, "b")
    assert a.state == "completed" and a.started_ms >= claimed["a"] + 60
    assert a.finished_ms - a.started_ms < 60, "runtime counted from the claim"
    assert b.state == "failed" and b.started_ms == claimed["b"], "no mark: the claim's time"


def test_the_settles_of_a_claim_call_carry_the_run_time(backend: Backend) -> None:
    publish(backend, "a")
    got = claim(backend).claims[0]
    claimed = record(backend, "a").started_ms
    _later(backend, claimed, by_ms=60)
    claim(backend, settles=[Settle("a", got.token, "ack", run_ms=0)])
    rec = record(backend, "a")
    assert rec.state == "completed" and rec.started_ms >= claimed + 60


def test_no_marks_and_stale_marks_change_nothing(backend: Backend) -> None:
    publish(backend, "a")
    got = claim(backend).claims[0]
    before = record(backend, "a")
    assert backend.heartbeat([("a", got.token)]) == [Verdict.RENEWED]
    assert backend.heartbeat([("a", got.token)], [None]) == [Verdict.RENEWED]
    assert backend.heartbeat([("a", got.token + 1000)], [NOT_STARTED]) == [Verdict.LOST]
    after = record(backend, "a")
    assert (after.started_ms, after.reserved) == (before.started_ms, False)


def test_wait_figures_start_when_the_task_started(backend: Backend) -> None:
    publish(backend, "a")
    got = claim(backend).claims[0]
    claimed = record(backend, "a").started_ms
    _later(backend, claimed, by_ms=200)
    backend.settle([Settle("a", got.token, "ack", run_ms=0)])
    with Admin(admin_for(backend)) as admin:
        [latency] = admin.latency()
    assert latency.p50_s >= 0.2, latency


def test_a_reserved_job_is_no_wait_sample_until_it_starts(backend: Backend) -> None:
    publish(backend, "a")
    got = claim(backend).claims[0]
    backend.heartbeat([("a", got.token)], [NOT_STARTED])
    with Admin(admin_for(backend)) as admin:
        assert admin.latency() == [], "a job not started yet counted as started"
    backend.heartbeat([("a", got.token)], [0])
    with Admin(admin_for(backend)) as admin:
        [latency] = admin.latency()
    assert latency.samples == 1
