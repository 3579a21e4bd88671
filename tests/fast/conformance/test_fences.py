"""Conformance: fenced continuations and lease tokens (DESIGN §1.4, §3.2; issue #11 defects 1, 10).

Rules: a continuation (retry / ``Task.replace``: a publish of a running job's id) applies only
when it carries the running claim's current lease token; a publish of a running id without
it, a continuation of a claim that was taken over, ended or recovered, and the same
continuation sent again (a client retrying after a lost reply) change nothing — no second
live delivery, no freed slot, no new schedule. A lease token never repeats for an id, even
after its record was pruned or purged and the id published again.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from celery_plus.admin import Admin, admin_for
from celery_plus.model.store import Backend, Settle, Verdict
from tests.inspectors import Inspector, inspector_for

from .support import Q, claim, ids, maintain, publish, record, wait_until

GROUP = {"concurrency_group": "g", "concurrency_limit": 1}


def _taken_over(make_backend: Callable[..., Backend]) -> tuple[Backend, int, int]:
    """Job ``a`` (group g, limit 1) claimed by w1, recovered, and now running on w2."""
    backend = make_backend(lease_ms=150)
    publish(backend, "a", "attempt-1", **GROUP)
    old = claim(backend, worker="w1").claims[0]
    wait_until(backend.recover, timeout=10, message="recovery of w1's lease")
    new = claim(backend, worker="w2").claims[0]
    assert new.job_id == "a" and new.token != old.token
    return backend, old.token, new.token


@pytest.mark.parametrize("carries", ["its token", "no token"])
def test_a_late_continuation_of_a_claim_taken_over_changes_nothing(
        make_backend: Callable[..., Backend], carries: str) -> None:
    """``no token``: the late retry of a worker whose release sent none (a rolling upgrade)."""
    backend, old, new = _taken_over(make_backend)
    before = record(backend, "a")
    deadline = inspector_for(backend).lease_deadline("a")
    eta = backend.now_ms() + 60_000
    token = {"lease_token": old} if carries == "its token" else {}
    out = publish(backend, "a", "late-retry", eta_ms=eta, **token, **GROUP)
    assert record(backend, "a") == before, "the new worker's claim was changed"
    assert inspector_for(backend).lease_deadline("a") == deadline
    assert inspector_for(backend).slot_holders("g") == {"a"}, "the live claim's slot was freed"
    assert inspector_for(backend).ids_in_state("scheduled") == [], "the job was scheduled again"
    # A second job of the group still cannot start beside the live claim.
    publish(backend, "b", **GROUP)
    assert ids(claim(backend, worker="w3")) == []
    assert (out.accepted, out.fenced, out.holder_id, out.state) == (False, True, "a", "running")
    # The live claim's own continuation still applies.
    out = publish(backend, "a", "retry", eta_ms=eta, lease_token=new, **GROUP)
    assert out.accepted and out.continued and out.state == "scheduled"
    assert inspector_for(backend).slot_holders("g") == set()


def test_a_publish_of_a_running_id_without_its_token_changes_nothing(backend: Backend,
                                                                     inspect: Inspector) -> None:
    """The same message again (a client retrying a publish whose reply was lost, after a
    worker claimed it), another message with the id, a wrong token: no second delivery."""
    publish(backend, "a", "original", **GROUP)
    got = claim(backend).claims[0]
    before = record(backend, "a")
    for message, token in (("original", None), ("outsider", 0),
                           ("outsider", got.token + 1000)):
        fields = {} if token is None else {"lease_token": token}
        out = publish(backend, "a", message, **fields, **GROUP)
        assert record(backend, "a") == before, f"the running claim was changed ({token})"
        assert inspect.slot_holders("g") == {"a"}, token
        assert ids(claim(backend, worker="w2")) == [], f"a second live delivery ({token})"
        assert out.fenced and not out.accepted and out.holder_id == "a", token
    assert backend.size(Q) == 0 and inspect.ids_in_state("scheduled") == []
    assert backend.settle([Settle("a", got.token, "ack")]) == []
    assert record(backend, "a").state == "completed"
    assert record(backend, "a").message == "original"


@pytest.mark.parametrize("delay_ms", [0, 60_000], ids=["immediate", "countdown"])
def test_a_continuation_sent_again_after_a_lost_reply_is_a_no_op(
        backend: Backend, inspect: Inspector, delay_ms: int) -> None:
    publish(backend, "a", **GROUP)
    got = claim(backend).claims[0]
    eta = backend.now_ms() + delay_ms if delay_ms else 0
    first = publish(backend, "a", "retry", eta_ms=eta, lease_token=got.token, **GROUP)
    assert first.accepted and first.continued
    after_first = record(backend, "a")
    again = publish(backend, "a", "retry", eta_ms=eta, lease_token=got.token, **GROUP)
    assert again.fenced and not again.accepted
    assert record(backend, "a") == after_first
    if delay_ms:
        assert inspect.ids_in_state("scheduled") == ["a"] and backend.size(Q) == 0
        return
    # One delivery of the retry; the resend, even once it runs, changes nothing.
    assert ids(claim(backend, worker="w2")) == ["a"]
    running = record(backend, "a")
    third = publish(backend, "a", "retry", lease_token=got.token, **GROUP)
    assert third.fenced and record(backend, "a") == running
    assert inspect.slot_holders("g") == {"a"} and backend.size(Q) == 0


@pytest.mark.parametrize("end", ["requeue", "release", "recovered", "taken over"])
def test_a_continuation_of_an_ended_claim_changes_nothing(
        make_backend: Callable[..., Backend], end: str) -> None:
    backend = make_backend(lease_ms=150)
    publish(backend, "a", "original", unique_lock="K", unique_window="running", **GROUP)
    got = claim(backend).claims[0]
    if end in ("recovered", "taken over"):
        wait_until(backend.recover, timeout=10, message="recovery")
        if end == "taken over":
            new = claim(backend, worker="w2").claims[0]
            backend.settle([Settle("a", new.token, "ack")])
    else:
        backend.settle([Settle("a", got.token, end, {"reason": "x"})])
    before = record(backend, "a")
    holds = inspector_for(backend).holds()
    out = publish(backend, "a", "late", lease_token=got.token, unique_lock="K",
                  unique_window="running", **GROUP)
    assert out.fenced and not out.accepted and out.state == before.state
    assert record(backend, "a") == before
    assert inspector_for(backend).holds() == holds
    assert inspector_for(backend).slot_holders("g") == set()


@pytest.mark.parametrize("end", ["ack", "fail"])
def test_a_publish_from_a_delivery_that_finished_its_own_job_starts_it_anew(
        backend: Backend, inspect: Inspector, end: str) -> None:
    """An early-acked task (``acks_late=False``) retries after its ack finished the job."""
    publish(backend, "a", "original", unique_lock="K", unique_window="running")
    got = claim(backend).claims[0]
    backend.settle([Settle("a", got.token, end, {"reason": "x"})])
    out = publish(backend, "a", "retry", lease_token=got.token, unique_lock="K",
                  unique_window="running")
    assert out.accepted and not out.continued and not out.fenced
    assert record(backend, "a").state == "enqueued" and inspect.holder("K") == "a"
    again = claim(backend).claims
    assert [(c.job_id, c.message) for c in again] == [("a", b"retry")]


def test_a_lease_token_never_repeats_for_an_id(make_backend: Callable[..., Backend]) -> None:
    backend = make_backend(retention=(0, 100_000, 0, 100_000))
    seen: list[int] = []
    # Pruned: completed, then removed by maintenance, then published again.
    publish(backend, "a")
    seen.append(claim(backend).claims[0].token)
    backend.settle([Settle("a", seen[-1], "ack")])
    wait_until(lambda: (maintain(backend), backend.record("a") is None)[1], timeout=10,
               message="the completed record pruned")
    publish(backend, "a")
    seen.append(claim(backend).claims[0].token)
    # Purged: back in its queue with its token, deleted by purge, then published again.
    backend.settle([Settle("a", seen[-1], "release")])
    assert backend.purge(Q) == 1 and backend.record("a") is None
    publish(backend, "a")
    seen.append(claim(backend).claims[0].token)
    assert len(set(seen)) == 3 and seen == sorted(seen), seen
    # The earlier deliveries' late acks change nothing.
    for token in seen[:-1]:
        backend.settle([Settle("a", token, "ack")])
        assert record(backend, "a").state == "running"
    # Tokens of different jobs differ too: one counter for the store.
    publish(backend, "b")
    assert claim(backend).claims[0].token > seen[-1]


@pytest.mark.not_queue_scoped("a job moved between queues (refused on a cluster: "
                              "tests/stores/test_redis_cluster_scope.py)")
def test_a_continuation_to_another_queue_moves_the_job(
        make_backend: Callable[..., Backend]) -> None:
    """``self.retry(queue="other")``: the running claim's continuation sends the job to another
    queue. One job, one live delivery: it waits in the other queue, the first queue's claim is
    over (no recovery delivers it again once its lease ends), and a publish of the id to a
    third queue without the token changes nothing while the job runs again."""
    backend = make_backend(lease_ms=150)
    publish(backend, "a", "original")
    got = claim(backend).claims[0]
    lease_over = backend.now_ms() + 200
    out = publish(backend, "a", "retry", queue="other", lease_token=got.token)
    assert out.accepted and out.continued
    # The worker's settle of the continued claim (the transport acks it).
    backend.settle([Settle("a", got.token, "ack")])
    assert record(backend, "a").state == "enqueued"
    # The first queue's lease ends: nothing of it is delivered again.
    wait_until(lambda: backend.now_ms() > lease_over, timeout=10, message="the lease's end")
    assert backend.recover() == []
    assert ids(claim(backend, worker="w2", queues=[Q])) == []
    again = claim(backend, worker="w3", queues=["other"]).claims
    assert [(c.job_id, c.message) for c in again] == [("a", b"retry")]
    assert again[0].token != got.token
    outsider = publish(backend, "a", "outsider", queue="third")
    assert outsider.fenced and not outsider.accepted
    assert ids(claim(backend, worker="w4", queues=["third"])) == []
    assert backend.settle([Settle("a", again[0].token, "ack")]) == []
    assert record(backend, "a").state == "completed"


def test_a_claim_ended_by_its_run_stays_continued_once_the_continuation_is_claimed(
        backend: Backend) -> None:
    """A replaced run may still be finishing when its replacement is claimed: the store must
    still tell its claim ended by its own continuation (the history, under its token), so
    the worker neither announces it lost nor stops the process that ran it."""
    publish(backend, "a", "attempt-1")
    old = claim(backend, worker="w1").claims[0]
    out = publish(backend, "a", "replacement", lease_token=old.token)
    assert out.accepted and out.continued
    assert backend.heartbeat([("a", old.token)]) == [Verdict.ENDED]  # waiting under its message
    new = claim(backend, worker="w2").claims[0]
    assert (new.job_id, new.deliveries) == ("a", 1) and new.token != old.token
    assert backend.heartbeat([("a", old.token), ("a", new.token)]) == [
        Verdict.ENDED, Verdict.RENEWED]


def test_a_claim_taken_over_is_never_continued(make_backend: Callable[..., Backend]) -> None:
    backend, old, new = _taken_over(make_backend)
    assert backend.heartbeat([("a", old)]) == [Verdict.LOST]
    assert publish(backend, "a", "late-retry", lease_token=old, **GROUP).fenced
    assert backend.heartbeat([("a", old), ("a", new)]) == [Verdict.LOST, Verdict.RENEWED]


def test_a_claim_whose_ack_landed_ended_by_its_run(backend: Backend) -> None:
    """A heartbeat can cross the claim's own ack on its way: the store then says the claim is
    gone, but its run ended it (completed under its token), nothing took it over."""
    publish(backend, "a", "attempt-1")
    got = claim(backend, worker="w1").claims[0]
    backend.settle([Settle("a", got.token, "ack")])
    assert backend.heartbeat([("a", got.token), ("a", got.token + 1)]) == [
        Verdict.ENDED, Verdict.LOST]


def test_a_recovered_claim_of_a_job_coalesced_since_is_lost(
        make_backend: Callable[..., Backend]) -> None:
    """Recovery found the job's ``pending`` key taken by a newer job and completed it as a
    duplicate, under the stale claim's token: that claim did not end by its run."""
    backend = make_backend(lease_ms=150)
    publish(backend, "a", unique_lock="P", unique_window="pending")
    stale = claim(backend, worker="w1").claims[0]
    assert publish(backend, "b", unique_lock="P", unique_window="pending").accepted
    recovered = wait_until(backend.recover, timeout=10, message="recovery")
    assert [(r.job_id, r.outcome) for r in recovered] == [("a", "coalesced")]
    assert (record(backend, "a").state, record(backend, "a").lease_token) == (
        "completed", stale.token)
    assert backend.heartbeat([("a", stale.token)]) == [Verdict.LOST]


def test_a_recovered_claim_of_a_job_published_again_since_is_lost(
        make_backend: Callable[..., Backend]) -> None:
    """The id published anew after a recovery waits under the stale claim's token with no
    delivery, as a continuation would: the history says the claim was recovered."""
    backend = make_backend(lease_ms=150)
    publish(backend, "a")
    stale = claim(backend, worker="w1").claims[0]
    wait_until(backend.recover, timeout=10, message="recovery")
    publish(backend, "a", "the same id again")
    again = record(backend, "a")
    assert (again.lease_token, again.deliveries) == (stale.token, 0)
    assert backend.heartbeat([("a", stale.token)]) == [Verdict.LOST]


def test_a_recovered_claim_of_a_dead_letter_retried_from_the_admin_is_lost(
        make_backend: Callable[..., Backend]) -> None:
    """Recovery dead-lettered the job at its delivery limit; an admin retry puts it back to
    waiting under the stale claim's token with no delivery, as a continuation would: the
    history says the claim was recovered."""
    backend = make_backend(lease_ms=150)
    publish(backend, "a", max_deliveries=1)
    stale = claim(backend, worker="w1").claims[0]
    recovered = wait_until(backend.recover, timeout=10, message="recovery")
    assert [(r.job_id, r.outcome) for r in recovered] == [("a", "dead")]
    assert Admin(admin_for(backend)).retry("a").state == "enqueued"
    again = record(backend, "a")
    assert (again.state, again.lease_token, again.deliveries) == ("enqueued", stale.token, 0)
    assert backend.heartbeat([("a", stale.token)]) == [Verdict.LOST]
