"""Conformance: claiming one job by id (``claim_job``, the coordination store's claim).

Rules: a waiting job (enqueued, scheduled whether due or not, blocked) is claimed by id as
``claim`` would claim it — running under a new token with a counted delivery and a lease,
out of its waiting index, its concurrency slot taken in the same step (a full group changes
nothing and says ``blocked``), the pending window's hold released and the running window's
kept; a running job is ``held`` (with the time its lease has left), a finished one
``finished``, an unknown id ``missing``, and none of them changes. Such a claim is settled,
renewed and recovered exactly like any other.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from celery_plus.model.store import Backend, JobClaim, Settle, Verdict
from tests.inspectors import Inspector, inspector_for

from .support import Q, claim, ids, maintain, publish, record, wait_until


def test_an_enqueued_job_is_claimed_by_id_and_leaves_its_queue(backend: Backend,
                                                               inspect: Inspector) -> None:
    publish(backend, "a", name="t")
    publish(backend, "b", name="t")
    got = backend.claim_job("b", "w1")
    assert got == JobClaim("claimed", "running", token=got.token, deliveries=1)
    assert got.token >= 1
    rec = record(backend, "b")
    assert rec.state == "running" and rec.worker == "w1" and rec.deliveries == 1
    assert rec.lease_token == got.token
    assert inspect.lease_deadline("b") is not None
    assert inspect.ids_in_state("running") == ["b"]
    assert backend.size(Q) == 1
    assert ids(claim(backend)) == ["a"], "a normal claim does not deliver it again"


def test_a_scheduled_job_is_claimed_by_id_whether_due_or_not(backend: Backend,
                                                             inspect: Inspector) -> None:
    publish(backend, "later", eta_ms=backend.now_ms() + 3_600_000)
    assert record(backend, "later").state == "scheduled"
    assert backend.claim_job("later", "w1").outcome == "claimed"
    assert inspect.ids_in_state("scheduled") == []
    assert record(backend, "later").state == "running"


def test_the_slot_is_taken_with_the_claim_and_a_full_group_changes_nothing(
        backend: Backend, inspect: Inspector) -> None:
    for name in ("g1", "g2", "g3"):
        publish(backend, name, concurrency_group="g", concurrency_limit=2)
    publish(backend, "h1", concurrency_group="h", concurrency_limit=2)
    assert backend.claim_job("g1", "w1").outcome == "claimed"
    assert backend.claim_job("g2", "w2").outcome == "claimed"
    assert inspect.slot_holders("g") == {"g1", "g2"}
    assert backend.claim_job("g3", "w3") == JobClaim("blocked", "enqueued")
    assert record(backend, "g3").state == "enqueued" and record(backend, "g3").deliveries == 0
    assert inspect.slot_holders("g") == {"g1", "g2"}
    assert backend.stats().get("blocked") == 1
    assert backend.claim_job("h1", "w3").outcome == "claimed", "other groups are not blocked"
    g1 = record(backend, "g1")
    backend.settle([Settle("g1", g1.lease_token, "ack")])
    assert backend.claim_job("g3", "w3").outcome == "claimed"
    assert inspect.slot_holders("g") == {"g2", "g3"}


def test_a_job_parked_by_a_claim_is_claimed_by_id_once_a_slot_frees(backend: Backend,
                                                                    inspect: Inspector) -> None:
    publish(backend, "g1", concurrency_group="g", concurrency_limit=1)
    publish(backend, "g2", concurrency_group="g", concurrency_limit=1)
    first = claim(backend)
    assert ids(first) == ["g1"] and first.blocked == ["g2"]
    backend.settle([Settle("g1", first.claims[0].token, "ack")])
    assert record(backend, "g2").state == "enqueued", "the freed slot unblocked it"
    publish(backend, "g3", concurrency_group="g", concurrency_limit=1)
    taken = claim(backend, max_jobs=1)
    assert ids(taken) == ["g2"]
    assert claim(backend).blocked == ["g3"]
    backend.settle([Settle("g2", taken.claims[0].token, "ack")])
    # The settle handed g3 back to its queue; claiming it by id takes it out of there.
    assert backend.claim_job("g3", "w1").outcome == "claimed"
    assert inspect.blocked_groups() == set() and inspect.ids_in_state("blocked") == []
    assert ids(claim(backend)) == []


def test_holds_follow_the_window_rules_of_a_claim(backend: Backend, inspect: Inspector) -> None:
    publish(backend, "p", unique_lock="t:p", unique_window="pending")
    publish(backend, "r", unique_lock="t:r", unique_window="running")
    assert inspect.holder("t:p") == "p" and inspect.holder("t:r") == "r"
    backend.claim_job("p", "w1")
    backend.claim_job("r", "w1")
    assert inspect.holder("t:p") is None, "the pending window ends when the job starts"
    assert inspect.holder("t:r") == "r", "the running window holds while it runs"
    backend.settle([Settle("r", record(backend, "r").lease_token, "ack")])
    assert inspect.holder("t:r") is None


def test_running_finished_and_unknown_jobs_are_reported_unchanged(backend: Backend) -> None:
    publish(backend, "a")
    first = backend.claim_job("a", "w1")
    again = backend.claim_job("a", "w2")
    assert again.outcome == "held" and again.state == "running" and again.token == 0
    assert 0 < again.lease_left_ms <= 30_000
    assert record(backend, "a").lease_token == first.token
    assert record(backend, "a").worker == "w1"
    backend.settle([Settle("a", first.token, "fail", {"reason": "task failed"})])
    assert backend.claim_job("a", "w2") == JobClaim("finished", "failed")
    assert record(backend, "a").state == "failed"
    assert backend.claim_job("nope", "w1") == JobClaim("missing")
    assert backend.record("nope") is None


def test_a_claim_by_id_is_renewed_recovered_and_fenced_like_any_claim(
        make_backend: Callable[..., Backend]) -> None:
    short = make_backend(lease_ms=300)
    inspect = inspector_for(short)
    publish(short, "a", concurrency_group="g", concurrency_limit=1, unique_lock="t:a",
            unique_window="running")
    first = short.claim_job("a", "w1")
    assert short.heartbeat([("a", first.token)]) == [Verdict.RENEWED]
    wait_until(lambda: (inspect.lease_deadline("a") or 0) < short.now_ms(), timeout=5,
               message="lease expired")
    maintain(short)
    recovered = short.recover()
    assert [(r.job_id, r.outcome) for r in recovered] == [("a", "requeued")]
    assert inspect.slot_holders("g") == set(), "recovery frees the slot"
    assert inspect.holder("t:a") == "a", "the running window keeps the hold for the rerun"
    second = short.claim_job("a", "w2")
    assert second.outcome == "claimed" and second.token > first.token
    assert second.deliveries == 2
    short.settle([Settle("a", first.token, "ack")])
    assert record(short, "a").state == "running", "the lost claim's ack changes nothing"
    assert short.heartbeat([("a", first.token)]) == [Verdict.LOST]
    short.settle([Settle("a", second.token, "ack")])
    assert record(short, "a").state == "completed"
    assert inspect.slot_holders("g") == set() and inspect.holder("t:a") is None


def test_concurrent_claims_by_id_never_oversubscribe_a_group(
        make_backend: Callable[..., Backend]) -> None:
    backends = [make_backend() for _ in range(6)]
    for i in range(6):
        publish(backends[0], f"g{i}", concurrency_group="g", concurrency_limit=2)
    publish(backends[0], "same")
    start = threading.Barrier(6)
    outcomes: dict[str, str] = {}
    same: list[str] = []

    def race(i: int) -> None:
        start.wait()
        outcomes[f"g{i}"] = backends[i].claim_job(f"g{i}", f"w{i}").outcome
        same.append(backends[i].claim_job("same", f"w{i}").outcome)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert sorted(outcomes.values()) == ["blocked"] * 4 + ["claimed"] * 2, outcomes
    claimed = {k for k, v in outcomes.items() if v == "claimed"}
    assert inspector_for(backends[0]).slot_holders("g") == claimed
    assert sorted(same) == ["claimed"] + ["held"] * 5, "one job id, one claim"
