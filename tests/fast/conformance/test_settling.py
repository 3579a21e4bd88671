"""Conformance: settling and fencing (DESIGN §1.4 fenced claims, §3.2 states, §3.6 dead letters).

Rules: a settle applies only while its (job, token) claim is current — a stale or unknown token,
or a finished job, changes nothing; settles sent with a claim take effect before it; ack
completes; fail/reject dead-letter with the message, the reason, the exception details and an
attempt in the history; requeue goes back to enqueued and records an attempt, or dead-letters
once deliveries reach the limit; defer does the same but waits scheduled for a back-off that
grows with the deliveries; release goes back without counting the delivery.
"""

from __future__ import annotations

import pytest

from celery_plus.model import rules
from celery_plus.model.store import SETTLE_ACTIONS, Backend, Settle
from tests.inspectors import Inspector

from .support import claim, history, ids, publish, record


def test_settle_with_a_stale_token_changes_nothing(backend: Backend, inspect: Inspector) -> None:
    publish(backend, "a")
    first = claim(backend).claims[0]
    backend.settle([Settle("a", first.token, "release")])
    second = claim(backend, worker="w2").claims[0]
    assert second.token == first.token + 1
    deadline = inspect.lease_deadline("a")
    assert deadline is not None
    for action in SETTLE_ACTIONS:
        assert backend.settle([Settle("a", first.token, action, {"reason": "late"})]) == []
        rec = record(backend, "a")
        assert (rec.state, rec.worker, rec.lease_token) == ("running", "w2", second.token), action
        assert inspect.lease_deadline("a") == deadline, action
    assert inspect.ids_in_state("completed") == [] and inspect.ids_in_state("failed") == []
    # A token never issued is no more effective.
    backend.settle([Settle("a", second.token + 5, "ack")])
    assert record(backend, "a").state == "running"


def test_settle_of_a_finished_job_changes_nothing(backend: Backend, inspect: Inspector) -> None:
    publish(backend, "a")
    tok = claim(backend).claims[0].token
    backend.settle([Settle("a", tok, "ack")])
    rec = record(backend, "a")
    assert rec.state == "completed" and rec.finished_ms > 0
    assert inspect.lease_deadline("a") is None
    assert inspect.ids_in_state("completed") == ["a"]
    for action in SETTLE_ACTIONS:
        assert backend.settle([Settle("a", tok, action)]) == []
        assert record(backend, "a") == rec, action
    assert backend.settle([Settle("nope", 1, "ack")]) == []
    assert backend.record("nope") is None


@pytest.mark.cluster_smoke
def test_settles_sent_with_a_claim_take_effect_before_it(backend: Backend) -> None:
    publish(backend, "a", concurrency_group="g", concurrency_limit=1)
    publish(backend, "b", concurrency_group="g", concurrency_limit=1)
    publish(backend, "c", max_deliveries=1)
    first = claim(backend, max_jobs=3)
    assert ids(first) == ["a", "c"] and first.blocked == ["b"]
    tokens = {c.job_id: c.token for c in first.claims}
    # Acking a frees the slot; b is unblocked by the settle and claimed by the same call.
    result = claim(backend, settles=(Settle("a", tokens["a"], "ack"),
                                     Settle("c", tokens["c"], "requeue")))
    assert ids(result) == ["b"]
    assert result.dead_lettered == [("c", "delivery limit")]
    assert record(backend, "a").state == "completed" and record(backend, "c").state == "failed"


def test_reject_and_fail_dead_letter_with_message_reason_and_details(backend: Backend,
                                                                     inspect: Inspector) -> None:
    publish(backend, "a", "the message", unique_lock="L", unique_window="running")
    publish(backend, "b")
    claims = {c.job_id: c for c in claim(backend).claims}
    detail = {"exc_type": "ValueError", "exc_message": "bad input", "traceback": "Traceback..."}
    dead = backend.settle([Settle("a", claims["a"].token, "reject", detail),
                           Settle("b", claims["b"].token, "fail",
                                  {"reason": "task failed", "exc_type": "KeyError"})])
    assert dead == [("a", "rejected"), ("b", "task failed")]
    assert "reason" not in detail, "the caller's detail was modified"
    rec = record(backend, "a")
    assert rec.state == "failed" and rec.reason == "rejected"
    assert rec.exc_type == "ValueError" and rec.exc_message == "bad input"
    assert rec.traceback == "Traceback..." and rec.message == "the message"
    assert rec.finished_ms > 0
    last = history(backend, "a")[-1]
    assert last["outcome"] == "rejected" and last["exc_type"] == "ValueError"
    assert last["delivery"] == 1 and last["worker"] == "w1"
    assert set(inspect.ids_in_state("failed")) == {"a", "b"}
    assert inspect.holder("L") is None
    assert inspect.lease_deadline("a") is None
    assert record(backend, "b").reason == "task failed"
    assert record(backend, "b").exc_type == "KeyError"
    assert backend.stats().get("dead_lettered") == 2


def test_requeue_at_the_delivery_limit_dead_letters(backend: Backend) -> None:
    publish(backend, "a", max_deliveries=1)
    tok = claim(backend).claims[0].token
    assert backend.settle([Settle("a", tok, "requeue")]) == [("a", "delivery limit")]
    rec = record(backend, "a")
    assert rec.state == "failed" and rec.reason == "delivery limit"
    assert rec.exc_message == "message delivered 1 times without being settled"
    assert rec.message == "msg-a"


def test_requeue_goes_back_to_enqueued_and_records_an_attempt(backend: Backend,
                                                              inspect: Inspector) -> None:
    publish(backend, "a")
    tok = claim(backend).claims[0].token
    backend.settle([Settle("a", tok, "requeue", {"reason": "worker lost", "exc_type": "WL"})])
    assert record(backend, "a").state == "enqueued"
    assert inspect.lease_deadline("a") is None
    again = claim(backend).claims[0]
    assert again.deliveries == 2 and again.token == tok + 1
    backend.settle([Settle("a", again.token, "requeue")])
    hist = history(backend, "a")
    assert [h["outcome"] for h in hist] == ["worker lost", "requeued"]
    assert hist[0]["exc_type"] == "WL" and "exc_type" not in hist[1]
    assert [h["delivery"] for h in hist] == [1, 2]


def test_defer_schedules_the_job_after_a_back_off_that_grows_with_its_deliveries(
        backend: Backend, inspect: Inspector) -> None:
    """defer: a counted give-back, not to the head of the queue but scheduled
    ``rules.defer_ms(deliveries)`` ahead (its slot freed, the jobs behind it claimable at
    once); dead-lettered at the delivery limit like requeue."""
    publish(backend, "a", max_deliveries=3, concurrency_group="g", concurrency_limit=1)
    publish(backend, "b", concurrency_group="g", concurrency_limit=1)
    tok = claim(backend, max_jobs=1).claims[0].token
    for delivery in (1, 2):
        detail = {"reason": "unreadable by this release"} if delivery == 1 else None
        assert backend.settle([Settle("a", tok, "defer", detail)]) == []
        rec = record(backend, "a")
        settled_at = rec.history[-1]["finished_ms"]
        assert (rec.state, rec.deliveries) == ("scheduled", delivery)
        assert rec.due_ms == settled_at + rules.defer_ms(delivery)
        assert inspect.lease_deadline("a") is None
        if delivery == 1:  # not due: the job behind it is claimed, its slot free
            result = claim(backend)
            assert ids(result) == ["b"] and result.next_due is not None
            backend.settle([Settle("b", result.claims[0].token, "ack")])
        got = backend.claim_job("a", "w1")  # by id, due or not: the next delivery
        assert (got.outcome, got.deliveries) == ("claimed", delivery + 1)
        tok = got.token
    assert [h["outcome"] for h in history(backend, "a")] == [
        "unreadable by this release", "deferred"]
    assert rules.defer_ms(1) < rules.defer_ms(2) <= rules.DEFER_MAX_MS == rules.defer_ms(99)
    assert backend.settle([Settle("a", tok, "defer")]) == [("a", "delivery limit")]
    assert record(backend, "a").state == "failed"


def test_release_does_not_count_a_delivery(backend: Backend) -> None:
    publish(backend, "a", max_deliveries=1)
    for _ in range(3):
        got = claim(backend).claims[0]
        assert got.deliveries == 1
        assert backend.settle([Settle("a", got.token, "release")]) == []
        rec = record(backend, "a")
        assert rec.state == "enqueued" and rec.deliveries == 0
    # A counted requeue at the limit dead-letters.
    got = claim(backend).claims[0]
    assert backend.settle([Settle("a", got.token, "requeue")]) == [("a", "delivery limit")]
