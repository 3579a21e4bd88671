"""Conformance: a heartbeat's verdict on each claim it asks about (DESIGN §3.5; rules.py
``heartbeat_verdict``).

Rules: a heartbeat answers one verdict per (job id, token) pair, in the order asked, decided in
the same atomic step as the renewal. ``renewed``: the job runs under that token (its lease is
extended). ``ended``: the claim's own run ended it — its ack landed (a heartbeat crossing it),
or its run continued it (a retry / ``Task.replace`` carrying its token), whether the
continuation still waits or another worker claimed it since. ``lost``: anything else — no
record, a stale token, recovered after its lease expired (and claimed again, dead-lettered, or
cancelled since), or its job cancelled. A job held under two tokens gets a verdict per claim.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from celery_plus.admin import Admin, admin_for
from celery_plus.model.store import Backend, Settle, Verdict
from tests.inspectors import Inspector

from .support import claim, publish, record, wait_until

RENEWED, ENDED, LOST = Verdict.RENEWED, Verdict.ENDED, Verdict.LOST


def test_a_current_claim_is_renewed(make_backend: Callable[..., Backend],
                                    inspect: Inspector) -> None:
    short = make_backend(lease_ms=5_000)
    publish(short, "a")
    got = claim(short).claims[0]
    before = inspect.lease_deadline("a")
    renewer = make_backend(lease_ms=600_000)
    assert renewer.heartbeat([("a", got.token)]) == [RENEWED]
    after = inspect.lease_deadline("a")
    assert before is not None and after is not None and after >= before + 590_000
    assert record(short, "a").state == "running"
    assert renewer.heartbeat([]) == []


def test_a_verdict_is_a_plain_string_value(backend: Backend) -> None:
    publish(backend, "a")
    got = claim(backend).claims[0]
    [verdict] = backend.heartbeat([("a", got.token)])
    assert verdict == "renewed" and str(verdict) == "renewed" and verdict is RENEWED


def test_a_claim_whose_ack_crossed_the_heartbeat_ended_by_its_run(
        backend: Backend, inspect: Inspector) -> None:
    publish(backend, "a")
    got = claim(backend).claims[0]
    backend.settle([Settle("a", got.token, "ack")])
    before = record(backend, "a")
    assert backend.heartbeat([("a", got.token)]) == [ENDED]
    assert record(backend, "a") == before, "the heartbeat changed an ended claim's job"
    assert inspect.lease_deadline("a") is None


@pytest.mark.parametrize("delay_ms", [0, 60_000], ids=["retry", "countdown"])
def test_a_claim_continued_by_its_run_ended_while_the_continuation_waits(
        backend: Backend, delay_ms: int) -> None:
    publish(backend, "a", "attempt-1")
    got = claim(backend).claims[0]
    eta = backend.now_ms() + delay_ms if delay_ms else 0
    out = publish(backend, "a", "retry", eta_ms=eta, lease_token=got.token)
    assert out.accepted and out.continued
    before = record(backend, "a")
    assert before.state == ("scheduled" if delay_ms else "enqueued")
    assert backend.heartbeat([("a", got.token)]) == [ENDED]
    assert record(backend, "a") == before
    # Its run's ack that follows is fenced: nothing changes, and the claim stays ended.
    assert backend.settle([Settle("a", got.token, "ack")]) == []
    assert backend.heartbeat([("a", got.token)]) == [ENDED]


def test_a_continued_claim_stays_ended_once_another_worker_claims_the_continuation(
        backend: Backend) -> None:
    publish(backend, "a", "attempt-1")
    old = claim(backend, worker="w1").claims[0]
    assert publish(backend, "a", "replacement", lease_token=old.token).continued
    new = claim(backend, worker="w2").claims[0]
    assert (new.job_id, new.deliveries) == ("a", 1) and new.token != old.token
    assert backend.heartbeat([("a", old.token)]) == [ENDED]
    assert backend.heartbeat([("a", new.token)]) == [RENEWED]
    # ... and once the continuation finished, too.
    backend.settle([Settle("a", new.token, "ack")])
    assert backend.heartbeat([("a", old.token), ("a", new.token)]) == [ENDED, ENDED]


@pytest.mark.cluster_smoke
def test_one_job_held_under_two_tokens_gets_a_verdict_per_claim(backend: Backend) -> None:
    """A worker holds the replaced claim (its ack still on its way) and the replacement it
    claimed itself: one call, one verdict each, whatever their order."""
    publish(backend, "a", "attempt-1")
    publish(backend, "b")
    old = claim(backend, max_jobs=1).claims[0]
    assert publish(backend, "a", "replacement", lease_token=old.token).continued
    got = {c.job_id: c for c in claim(backend).claims}
    new, b = got["a"], got["b"]
    assert backend.heartbeat([("a", old.token), ("a", new.token), ("b", b.token)]) == [
        ENDED, RENEWED, RENEWED]
    assert backend.heartbeat([("b", b.token), ("a", new.token), ("a", old.token)]) == [
        RENEWED, RENEWED, ENDED]
    assert backend.heartbeat([("a", new.token), ("nope", 1), ("a", new.token)]) == [
        RENEWED, LOST, RENEWED]
    assert record(backend, "a").state == "running"


def test_a_claim_recovered_and_claimed_by_another_worker_is_lost(
        make_backend: Callable[..., Backend]) -> None:
    backend = make_backend(lease_ms=150)
    publish(backend, "a", concurrency_group="g", concurrency_limit=1)
    old = claim(backend, worker="w1").claims[0]
    wait_until(backend.recover, timeout=10, message="recovery of w1's lease")
    # Recovered, waiting again: lost already (its delivery was counted: not a continuation).
    assert backend.heartbeat([("a", old.token)]) == [LOST]
    new = claim(backend, worker="w2").claims[0]
    assert backend.heartbeat([("a", old.token), ("a", new.token)]) == [LOST, RENEWED]
    # The late continuation of the stale run is fenced, and the claim stays lost.
    assert publish(backend, "a", "late-retry", lease_token=old.token).fenced
    backend.settle([Settle("a", new.token, "ack")])
    assert backend.heartbeat([("a", old.token)]) == [LOST]


def test_a_claim_recovered_at_its_delivery_limit_is_lost(
        make_backend: Callable[..., Backend]) -> None:
    backend = make_backend(lease_ms=150)
    publish(backend, "a", max_deliveries=1)
    stale = claim(backend).claims[0]
    recovered = wait_until(backend.recover, timeout=10, message="recovery")
    assert [(r.job_id, r.outcome) for r in recovered] == [("a", "dead")]
    assert backend.heartbeat([("a", stale.token)]) == [LOST]


@pytest.mark.parametrize("end", ["released", "recovered"])
def test_a_claim_whose_job_was_cancelled_since_is_lost(
        make_backend: Callable[..., Backend], end: str) -> None:
    backend = make_backend(lease_ms=150)
    publish(backend, "a")
    got = claim(backend).claims[0]
    if end == "released":  # given back unstarted: its own doing, until the job is cancelled
        backend.settle([Settle("a", got.token, "release")])
        assert backend.heartbeat([("a", got.token)]) == [ENDED]
    else:
        wait_until(backend.recover, timeout=10, message="recovery")
    assert Admin(admin_for(backend)).cancel("a").state == "canceled"
    assert backend.heartbeat([("a", got.token)]) == [LOST]


@pytest.mark.cluster_smoke
def test_a_claim_of_no_record_or_of_a_stale_token_is_lost(backend: Backend) -> None:
    publish(backend, "a")
    got = claim(backend).claims[0]
    assert backend.heartbeat([("nope", 1), ("a", got.token + 1), ("a", got.token)]) == [
        LOST, LOST, RENEWED]
    assert backend.heartbeat([("a", 0)]) == [LOST]
