"""Conformance: publishing and uniqueness holds (DESIGN §3.2 records and continuations, §3.3).

Rules: a job record has the same field names on every backend; a duplicate publish stores
nothing and returns the holder; a publish of an existing id replaces its message (a duplicate
one leaves the job in place; a finished one starts afresh, history kept); the windows —
running (held until the job finishes; only the holder releases it), pending (released at claim,
taken again on requeue; a requeue into a taken key coalesces), ttl (never released early, gone
when the TTL is over); a continuation (publish of a running id) settles the running claim,
keeps the running hold and fences the old delivery's ack, or coalesces into a taken key.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from celery_plus.model.store import Backend, Settle
from tests.inspectors import Inspector, inspector_for

from .support import claim, history, ids, publish, record, wait_until


def test_job_record_has_the_same_field_names_on_every_backend(backend: Backend,
                                                              inspect: Inspector) -> None:
    publish(backend, "a", name="t", priority=3, unique_lock="L", unique_window="pending",
            concurrency_group="g", concurrency_limit=2, max_deliveries=4)
    rec = record(backend, "a")
    assert rec.state == "enqueued" and rec.queue == "jobs" and rec.message == "msg-a"
    assert rec.deliveries == 0 and rec.max_deliveries == 4 and rec.unique_lock == "L"
    assert rec.unique_window == "pending" and rec.unique_ttl_ms == 0
    assert rec.concurrency_group == "g" and rec.concurrency_limit == 2 and rec.due_ms == 0
    assert rec.score >> 40 == 3 and rec.enqueued_ms > 0
    # Fields a record gets later are absent until then.
    assert not {"tok", "start", "fin", "wk", "reason", "hist"} & set(inspect.job("a") or {})
    assert backend.record("missing") is None
    # A job with neither unique key nor group has no extension fields.
    publish(backend, "plain")
    assert not {"uk", "uw", "ut", "cg", "cl"} & set(inspect.job("plain") or {})
    assert ids(claim(backend)) == ["plain", "a"]  # a has priority 3


def test_duplicate_publish_stores_nothing_and_returns_the_holder(backend: Backend,
                                                                 inspect: Inspector) -> None:
    first = publish(backend, "a", unique_lock="L", unique_window="running")
    assert first.accepted and first.holder_id is None
    assert inspect.holder("L") == "a"
    dup = publish(backend, "b", "other message", unique_lock="L", unique_window="running")
    assert not dup.accepted and dup.holder_id == "a" and dup.job_id == "b"
    assert backend.record("b") is None
    assert inspect.ids_in_state("enqueued") == ["a"]
    assert record(backend, "a").message == "msg-a"
    # Also while the holder runs.
    claim(backend)
    dup = publish(backend, "c", unique_lock="L", unique_window="running")
    assert not dup.accepted and dup.holder_id == "a"
    assert backend.stats().get("deduplicated") == 2


def test_republish_of_the_same_id_replaces_its_message(backend: Backend,
                                                       inspect: Inspector) -> None:
    publish(backend, "a", "first", unique_lock="L", unique_window="running")
    again = publish(backend, "a", "second", unique_lock="L", unique_window="running")
    assert again.accepted and not again.continued
    assert inspect.ids_in_state("enqueued") == ["a"]
    assert claim(backend).claims[0].message == b"second"


def test_duplicate_republish_of_an_existing_id_leaves_that_job_in_place(
        backend: Backend) -> None:
    publish(backend, "a", "first")
    publish(backend, "b", unique_lock="L", unique_window="running")
    dup = publish(backend, "a", "second", unique_lock="L", unique_window="running")
    assert not dup.accepted and dup.holder_id == "b"
    assert record(backend, "a").message == "first"
    assert [c.message for c in claim(backend).claims] == [b"first", b"msg-b"]


def test_republish_of_a_finished_id_starts_afresh_and_keeps_its_history(
        backend: Backend, inspect: Inspector) -> None:
    publish(backend, "a", "first")
    tok = claim(backend).claims[0].token
    backend.settle([Settle("a", tok, "fail", {"exc_type": "E", "traceback": "tb"})])
    assert record(backend, "a").state == "failed"
    out = publish(backend, "a", "second")
    assert out.accepted and out.state == "enqueued"
    rec = record(backend, "a")
    assert rec.state == "enqueued" and rec.deliveries == 0 and rec.lease_token == 1
    assert not {"reason", "etype", "emsg", "tb", "start", "fin", "wk"} & set(inspect.job("a") or {})
    assert inspect.ids_in_state("failed") == []
    assert history(backend, "a")[-1]["outcome"] == "task failed", "history lost"
    again = claim(backend).claims[0]
    assert again.message == b"second" and again.token == 2 and again.deliveries == 1


def test_running_hold_is_released_only_by_its_holder(make_backend: Callable[..., Backend]) -> None:
    backend = make_backend(backstop_ms=1_000)
    inspect = inspector_for(backend)
    publish(backend, "a", unique_lock="L", unique_window="running")
    assert inspect.holder("L") == "a"
    tok_a = claim(backend).claims[0].token
    # The backstop lets a stuck hold go; another job then takes the key.
    wait_until(lambda: inspect.holder("L") is None, timeout=10, message="backstop expiry")
    assert publish(backend, "b", unique_lock="L", unique_window="running").accepted
    assert inspect.holder("L") == "b"
    backend.settle([Settle("a", tok_a, "ack")])
    assert record(backend, "a").state == "completed"
    assert inspect.holder("L") == "b", "a's ack released b's hold"
    # The holder's own ack releases it.
    long = make_backend()
    tok_b = claim(long).claims[0].token
    assert inspect.holder("L") == "b"
    long.settle([Settle("b", tok_b, "ack")])
    assert inspect.holder("L") is None
    assert inspect.holds() == {}


def test_running_hold_is_kept_while_running_and_released_by_dead_letter(
        backend: Backend, inspect: Inspector) -> None:
    publish(backend, "a", unique_lock="L", unique_window="running")
    tok = claim(backend).claims[0].token
    assert inspect.holder("L") == "a"
    assert not publish(backend, "b", unique_lock="L", unique_window="running").accepted
    backend.settle([Settle("a", tok, "fail", {"reason": "task failed"})])
    assert inspect.holder("L") is None
    assert publish(backend, "b", unique_lock="L", unique_window="running").accepted


@pytest.mark.cluster_smoke
def test_pending_hold_is_released_at_claim_and_taken_again_on_requeue(backend: Backend,
                                                                      inspect: Inspector) -> None:
    publish(backend, "a", unique_lock="L", unique_window="pending")
    assert inspect.holder("L") == "a"
    dup = publish(backend, "b", unique_lock="L", unique_window="pending")
    assert not dup.accepted and dup.holder_id == "a"
    # The same applies to a graceful release.
    for action in ("requeue", "release"):
        tok = claim(backend).claims[0].token
        assert inspect.holder("L") is None, action
        backend.settle([Settle("a", tok, action)])
        assert record(backend, "a").state == "enqueued"
        assert inspect.holder("L") == "a", action
        dup = publish(backend, f"c-{action}", unique_lock="L", unique_window="pending")
        assert not dup.accepted and dup.holder_id == "a"


def test_requeue_in_pending_window_coalesces_when_the_key_was_taken(backend: Backend,
                                                                    inspect: Inspector) -> None:
    publish(backend, "a", unique_lock="L", unique_window="pending")
    tok = claim(backend).claims[0].token
    assert publish(backend, "b", unique_lock="L", unique_window="pending").accepted
    assert inspect.holder("L") == "b"
    backend.settle([Settle("a", tok, "requeue")])
    rec = record(backend, "a")
    assert rec.state == "completed" and rec.reason == "coalesced"
    assert inspect.holder("L") == "b"
    assert inspect.ids_in_state("enqueued") == ["b"]
    assert backend.stats().get("deduplicated") == 1


def test_ttl_hold_is_never_released_early(backend: Backend, inspect: Inspector) -> None:
    publish(backend, "a", unique_lock="T", unique_window="ttl", unique_ttl_ms=60_000)
    assert inspect.holder("T") == "a"
    tok = claim(backend).claims[0].token
    assert inspect.holder("T") == "a", "claim released a ttl hold"
    backend.settle([Settle("a", tok, "ack")])
    assert record(backend, "a").state == "completed"
    assert inspect.holder("T") == "a", "ack released a ttl hold"
    deadline = inspect.hold_deadline("T")
    assert deadline is not None and deadline - backend.now_ms() > 50_000
    dup = publish(backend, "b", unique_lock="T", unique_window="ttl", unique_ttl_ms=60_000)
    assert not dup.accepted and dup.holder_id == "a"
    again = inspect.hold_deadline("T")
    assert again is not None and abs(again - deadline) <= 5, "a duplicate extended the ttl"
    # Nor is it released by a requeue or a dead letter.
    publish(backend, "c", unique_lock="T2", unique_window="ttl", unique_ttl_ms=60_000)
    tok = claim(backend).claims[0].token
    backend.settle([Settle("c", tok, "requeue")])
    assert inspect.holder("T2") == "c"
    tok = claim(backend).claims[0].token
    backend.settle([Settle("c", tok, "reject")])
    assert record(backend, "c").state == "failed"
    assert inspect.holder("T2") == "c"


def test_ttl_hold_lapses_when_its_ttl_is_over(backend: Backend, inspect: Inspector) -> None:
    publish(backend, "d", unique_lock="T3", unique_window="ttl", unique_ttl_ms=2_000)
    tok = claim(backend).claims[0].token
    backend.settle([Settle("d", tok, "ack")])
    assert inspect.holder("T3") == "d"
    wait_until(lambda: inspect.holder("T3") is None, timeout=10, message="ttl expiry")
    assert inspect.hold_deadline("T3") is None
    assert publish(backend, "e", unique_lock="T3", unique_window="ttl",
                   unique_ttl_ms=2_000).accepted
    assert inspect.holder("T3") == "e"


def test_continuation_settles_the_running_claim_and_keeps_the_running_hold(
        backend: Backend, inspect: Inspector) -> None:
    publish(backend, "a", "attempt-1", unique_lock="L", unique_window="running",
            concurrency_group="g", concurrency_limit=1)
    publish(backend, "x", concurrency_group="g", concurrency_limit=1)
    first = claim(backend, max_jobs=1).claims[0]
    assert inspect.slot_holders("g") == {"a"}
    assert ids(claim(backend)) == [] and record(backend, "x").state == "blocked"
    # Retry / Task.replace: a new message with the running job's id.
    eta = backend.now_ms() + 60_000
    out = publish(backend, "a", "attempt-2", eta_ms=eta, unique_lock="L",
                  unique_window="running", concurrency_group="g", concurrency_limit=1,
                  lease_token=first.token)
    assert out.accepted and out.continued and out.state == "scheduled"
    rec = record(backend, "a")
    assert rec.state == "scheduled" and rec.message == "attempt-2" and rec.due_ms == eta
    assert inspect.lease_deadline("a") is None
    assert "a" not in inspect.slot_holders("g")
    assert record(backend, "x").state == "enqueued", "freed slot did not unblock"
    assert inspect.holder("L") == "a"
    assert history(backend, "a")[-1]["outcome"] == "retried"
    # The old delivery's ack is a fenced no-op.
    backend.settle([Settle("a", first.token, "ack")])
    assert record(backend, "a").state == "scheduled"
    assert inspect.holder("L") == "a"
    assert not publish(backend, "b", unique_lock="L", unique_window="running").accepted
    # An immediate continuation is claimable with a new token.
    publish(backend, "a", "attempt-3", unique_lock="L", unique_window="running")
    claims = claim(backend, max_jobs=5).claims
    again = next(c for c in claims if c.job_id == "a")
    assert again.message == b"attempt-3" and again.token > first.token


def test_continuation_into_a_taken_key_coalesces_the_running_job(backend: Backend,
                                                                 inspect: Inspector) -> None:
    publish(backend, "a", unique_lock="P", unique_window="pending")
    token = claim(backend).claims[0].token
    assert publish(backend, "b", unique_lock="P", unique_window="pending").accepted
    out = publish(backend, "a", "retry", unique_lock="P", unique_window="pending",
                  lease_token=token)
    assert not out.accepted and out.holder_id == "b"
    rec = record(backend, "a")
    assert rec.state == "completed" and rec.reason == "coalesced"
    assert inspect.lease_deadline("a") is None
    assert inspect.holder("P") == "b"
