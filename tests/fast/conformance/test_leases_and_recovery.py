"""Conformance: leases, heartbeats and recovery (DESIGN §3.5, §1.4).

Rules: a claim's lease is ``now + lease``; a heartbeat renews only claims that are still
current and reports each of the others as ended by its own run or lost
(``test_heartbeat_verdicts.py``); recovery uses the *stored* lease deadline, never the
recovering worker's own setting, returns an expired claim to enqueued (recording the attempt
and the worker that held it) or dead-letters it once deliveries reach the limit (releasing its
hold), coalesces it when its pending-window key was taken meanwhile; the dead worker's late ack
is fenced out.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from celery_plus.model.store import Backend, Settle, Verdict
from tests.inspectors import inspector_for

from .support import claim, history, ids, publish, record, wait_until


def test_a_claim_sets_its_lease_to_now_plus_the_lease_time(
        make_backend: Callable[..., Backend]) -> None:
    backend = make_backend(lease_ms=60_000)
    publish(backend, "a")
    before = backend.now_ms()
    claim(backend)
    after = backend.now_ms()
    deadline = inspector_for(backend).lease_deadline("a")
    assert deadline is not None and before + 60_000 <= deadline <= after + 60_000


def test_heartbeat_renews_only_current_claims(make_backend: Callable[..., Backend]) -> None:
    short = make_backend(lease_ms=5_000)
    inspect = inspector_for(short)
    for name in ("a", "b", "c"):
        publish(short, name)
    claims = {c.job_id: c for c in claim(short).claims}
    short.settle([Settle("b", claims["b"].token, "ack")])
    before = inspect.lease_deadline("a")
    c_before = inspect.lease_deadline("c")
    renewer = make_backend(lease_ms=600_000)
    verdicts = renewer.heartbeat([("a", claims["a"].token), ("b", claims["b"].token),
                                  ("c", claims["c"].token + 1), ("nope", 1)])
    # b's ack landed (its run ended it); c's token is not current, nope has no record.
    assert verdicts == [Verdict.RENEWED, Verdict.ENDED, Verdict.LOST, Verdict.LOST]
    after = inspect.lease_deadline("a")
    assert after is not None and before is not None and after >= before + 590_000
    assert inspect.lease_deadline("c") == c_before, "a stale heartbeat renewed a lease"
    assert inspect.lease_deadline("b") is None and inspect.lease_deadline("nope") is None
    assert renewer.heartbeat([]) == []


def test_heartbeat_reports_a_stale_claim_beside_a_current_claim_of_the_same_job(
        backend: Backend) -> None:
    # One process can hold two claims of one job: a delivery whose lease was recovered while
    # the worker was frozen, and its new claim of the same job. The stale one is lost.
    publish(backend, "a")
    publish(backend, "b")
    old = claim(backend, max_jobs=1).claims[0]
    backend.settle([Settle("a", old.token, "release")])
    new = claim(backend, max_jobs=1).claims[0]
    assert new.job_id == "a" and new.token != old.token
    assert backend.heartbeat([("a", old.token), ("a", new.token)]) == [
        Verdict.LOST, Verdict.RENEWED]
    assert backend.heartbeat([("a", new.token), ("a", old.token)]) == [
        Verdict.RENEWED, Verdict.LOST]
    assert backend.heartbeat([("a", new.token), ("a", new.token)]) == [Verdict.RENEWED] * 2
    assert record(backend, "a").state == "running"


def test_recovery_requeues_by_the_stored_lease_deadline(
        make_backend: Callable[..., Backend]) -> None:
    short = make_backend(lease_ms=200)
    long = make_backend(lease_ms=600_000)
    publish(short, "short")
    publish(short, "long")
    dead = claim(short, max_jobs=1, worker="dead-worker").claims
    assert [c.job_id for c in dead] == ["short"]
    assert ids(claim(long, max_jobs=1, worker="live-worker")) == ["long"]
    # A recovering worker with long leases still recovers by the stored deadline...
    recovered = wait_until(long.recover, timeout=10, message="expired lease recovered")
    assert [(r.job_id, r.outcome) for r in recovered] == [("short", "requeued")]
    assert record(short, "short").state == "enqueued"
    assert inspector_for(short).lease_deadline("short") is None
    last = history(short, "short")[-1]
    assert last["outcome"] == "lease expired" and last["worker"] == "dead-worker"
    assert last["exc_message"] == "lease expired (claimed by dead-worker)"
    assert short.stats().get("recovered") == 1
    # ...and one with short leases never recovers a claim whose stored deadline is far.
    assert short.recover() == []
    assert record(short, "long").state == "running"
    again = claim(long).claims[0]
    assert again.job_id == "short" and again.deliveries == 2 and again.token > dead[0].token


@pytest.mark.cluster_smoke
def test_the_dead_workers_late_ack_after_recovery_is_fenced_out(
        make_backend: Callable[..., Backend]) -> None:
    backend = make_backend(lease_ms=150)
    publish(backend, "a")
    old = claim(backend, worker="dead-worker").claims[0]
    wait_until(backend.recover, timeout=10, message="recovery")
    new = claim(backend, worker="w2").claims[0]
    assert backend.heartbeat([("a", old.token)]) == [Verdict.LOST], "the old claim was renewed"
    assert backend.settle([Settle("a", old.token, "ack")]) == []
    rec = record(backend, "a")
    assert rec.state == "running" and rec.worker == "w2" and rec.lease_token == new.token
    backend.settle([Settle("a", new.token, "ack")])
    assert record(backend, "a").state == "completed"


def test_recovery_dead_letters_at_the_delivery_limit(
        make_backend: Callable[..., Backend]) -> None:
    backend = make_backend(lease_ms=150)
    publish(backend, "a", unique_lock="L", unique_window="running", max_deliveries=2)
    assert claim(backend).claims[0].deliveries == 1
    out = wait_until(backend.recover, timeout=10, message="first recovery")
    assert [(r.job_id, r.outcome) for r in out] == [("a", "requeued")]
    assert claim(backend).claims[0].deliveries == 2
    out = wait_until(backend.recover, timeout=10, message="second recovery")
    assert [(r.job_id, r.outcome) for r in out] == [("a", "dead")]
    rec = record(backend, "a")
    assert rec.state == "failed" and rec.reason == "delivery limit"
    assert rec.exc_message == "message delivered 2 times; last lease expired"
    assert rec.message == "msg-a"
    assert inspector_for(backend).ids_in_state("failed") == ["a"]
    assert inspector_for(backend).lease_deadline("a") is None
    assert inspector_for(backend).holder("L") is None
    assert ids(claim(backend)) == []


def test_recovery_in_pending_window_coalesces_when_the_key_was_taken(
        make_backend: Callable[..., Backend]) -> None:
    backend = make_backend(lease_ms=150)
    publish(backend, "a", unique_lock="P", unique_window="pending")
    claim(backend)
    assert publish(backend, "b", unique_lock="P", unique_window="pending").accepted
    out = wait_until(backend.recover, timeout=10, message="recovery")
    assert [(r.job_id, r.outcome) for r in out] == [("a", "coalesced")]
    rec = record(backend, "a")
    assert rec.state == "completed" and rec.reason == "coalesced"
    assert inspector_for(backend).holder("P") == "b"
    assert ids(claim(backend)) == ["b"]
