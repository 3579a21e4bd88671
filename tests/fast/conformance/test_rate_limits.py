"""Conformance: cluster rate limits (docs/rate-limits.md).

Rules: a job of a rate group is claimed only while the group's window holds fewer than
``rate_limit`` entries, counted across every worker in the claim's own atomic step: the starts
of the last ``rate_window_ms`` (``rate_started``) and the claims not started yet (a prefetched
job: counted until it starts or its first lease deadline passes). A job over the limit is
parked (``blocked``) — it never holds back other jobs of its queue — and is given back, oldest
first and keeping its place in line, when the window has room (by the next claim or
maintenance pass); groups are independent; a rate limit and a concurrency limit on the same
job both hold.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from celery_plus.model.store import Backend, ClaimResult, Settle, Verdict
from tests.inspectors import Inspector, inspector_for

from .support import Q, claim, ids, maintain, publish, record, wait_until

RATE = {"rate_group": "t:", "rate_limit": 2}


def started(backend: Backend, result: ClaimResult) -> list[str]:
    """The claimed ids, each task started now (as the worker reports it)."""
    for c in result.claims:
        backend.rate_started(c.job_id, c.token)
    return ids(result)


def test_a_job_record_shows_its_rate_limit_on_every_backend(backend: Backend,
                                                            inspect: Inspector) -> None:
    publish(backend, "a", rate_window_ms=60_000, **RATE)
    publish(backend, "plain")
    rec = record(backend, "a")
    assert (rec.rate_group, rec.rate_limit, rec.rate_window_ms) == ("t:", 2, 60_000)
    assert not {"rg", "rl", "rw"} & set(inspect.job("plain") or {}), "no rate fields stored"
    publish(backend, "a", "again without a limit")
    assert not {"rg", "rl", "rw"} & set(inspect.job("a") or {})


def test_a_full_window_parks_the_job_for_every_worker(
        make_backend: Callable[..., Backend]) -> None:
    one, two = make_backend(), make_backend()
    for i in range(4):
        publish(one, f"r{i}", rate_window_ms=60_000, **RATE)
    result = claim(one)
    assert ids(result) == ["r0", "r1"] and result.blocked == ["r2", "r3"]
    assert record(one, "r2").state == "blocked"
    assert sorted(inspector_for(one).ids_in_state("blocked")) == ["r2", "r3"]
    assert one.stats().get("rate_limited") == 2
    publish(two, "r4", rate_window_ms=60_000, **RATE)
    result = claim(two, worker="w2")
    assert ids(result) == [] and result.blocked == ["r4"]


def test_a_parked_job_does_not_hold_back_its_queue(backend: Backend) -> None:
    for i in range(3):
        publish(backend, f"r{i}", rate_window_ms=60_000, **RATE)
    publish(backend, "free")
    assert ids(claim(backend, max_jobs=2)) == ["r0", "r1"]
    result = claim(backend)
    assert ids(result) == ["free"] and result.blocked == ["r2"]


def test_parked_jobs_come_back_in_order_when_the_window_has_room(backend: Backend,
                                                                 inspect: Inspector) -> None:
    for name in ("a", "b", "c", "d", "e"):
        publish(backend, name, rate_window_ms=400, **RATE)
    first = claim(backend)
    assert started(backend, first) == ["a", "b"] and first.blocked == ["c", "d", "e"]
    # The claim tells an idle worker when to look again: when the window opens.
    assert first.next_due is not None and 0 < first.next_due <= 30.0
    assert claim(backend).next_due is not None and 0 < claim(backend).next_due <= 0.401
    publish(backend, "later", rate_window_ms=400, **RATE)
    got: list[str] = []
    wait_until(lambda: got.extend(started(backend, claim(backend))) or len(got) >= 2,
               timeout=10, message="the window's room")
    assert got == ["c", "d"]
    assert sorted(inspect.ids_in_state("blocked")) == ["e", "later"]
    got = []
    wait_until(lambda: got.extend(started(backend, claim(backend))) or len(got) >= 2,
               timeout=10, message="the next window")
    assert got == ["e", "later"]


def test_no_window_ever_holds_more_claims_than_the_limit(
        make_backend: Callable[..., Backend]) -> None:
    workers = [make_backend(), make_backend()]
    for i in range(12):
        publish(workers[0], f"j{i:02d}", rate_group="t:", rate_limit=3, rate_window_ms=250)
    claimed: list[str] = []
    turn = 0

    def claim_some() -> bool:
        nonlocal turn
        turn += 1
        result = claim(workers[turn % 2], max_jobs=2, worker=f"w{turn % 2}")
        for c in result.claims:
            # The store stamps the start between these two readings of its clock.
            before = workers[turn % 2].now_ms()
            workers[turn % 2].rate_started(c.job_id, c.token)
            starts.append((before, workers[turn % 2].now_ms()))
        claimed.extend(ids(result))
        return len(claimed) == 12

    starts: list[tuple[int, int]] = []
    wait_until(claim_some, timeout=20, message="every job claimed")
    assert claimed == sorted(claimed)  # in order
    starts.sort()
    # No 4 starts in one window: the 4th start after any start is more than 250 ms later.
    assert all(later[1] - first[0] > 250
               for first, later in zip(starts, starts[3:], strict=False)), starts


def test_groups_are_independent(backend: Backend) -> None:
    for group in ("a", "b"):
        for i in range(2):
            publish(backend, f"{group}{i}", rate_group=f"t:{group}", rate_limit=1,
                    rate_window_ms=60_000)
    result = claim(backend)
    assert ids(result) == ["a0", "b0"] and result.blocked == ["a1", "b1"]


def test_a_rate_limit_and_a_concurrency_limit_both_hold(backend: Backend) -> None:
    both = {"concurrency_group": "g", "concurrency_limit": 1, "rate_window_ms": 60_000,
            **RATE}
    for name in ("a", "b", "c"):
        publish(backend, name, **both)
    first = claim(backend)
    # b waits for the slot (not counted in the window); c too.
    assert started(backend, first) == ["a"] and first.blocked == ["b", "c"]
    backend.settle([Settle("a", first.claims[0].token, "ack")])
    assert record(backend, "b").state == "enqueued"
    second = claim(backend)
    assert started(backend, second) == ["b"]
    backend.settle([Settle("b", second.claims[0].token, "ack")])
    # The slot is free now, but the window holds two claims: c stays parked.
    assert ids(claim(backend)) == []
    assert record(backend, "c").state == "blocked"


def test_maintenance_gives_parked_jobs_back_without_a_claim(
        make_backend: Callable[..., Backend]) -> None:
    backend = make_backend()
    for name in ("a", "b", "c"):
        publish(backend, name, rate_window_ms=200, **RATE)
    first = claim(backend)
    assert first.blocked == ["c"]
    started(backend, first)

    def released() -> bool:
        maintain(backend)
        return record(backend, "c").state == "enqueued"

    wait_until(released, timeout=10, message="maintenance released the parked job")


def test_a_parked_job_is_purged_canceled_or_replaced_like_any_waiting_job(
        backend: Backend, inspect: Inspector) -> None:
    for name in ("a", "b", "c", "d"):
        publish(backend, name, rate_group="t:", rate_limit=1, rate_window_ms=60_000)
    assert claim(backend).blocked == ["b", "c", "d"]
    # Published again (same id, no limit now): it leaves the parked jobs and is claimable.
    publish(backend, "b")
    assert ids(claim(backend)) == ["b"]
    assert backend.purge(Q) == 2
    assert inspect.ids_in_state("blocked") == []
    assert backend.record("c") is None


def test_a_claim_not_started_yet_counts_until_it_starts_or_its_lease_lapses(
        make_backend: Callable[..., Backend]) -> None:
    backend = make_backend(lease_ms=800)
    for name in ("a", "b", "c", "d"):
        publish(backend, name, rate_window_ms=100, **RATE)
    # The store stamps the claims somewhere between these two readings of its clock.
    asked_at = backend.now_ms()
    first = claim(backend)
    claimed_at = backend.now_ms()
    assert ids(first) == ["a", "b"] and first.blocked == ["c", "d"]
    # Prefetched, not started: the window of 100 ms passes, and the claims still count.
    time.sleep(0.25)
    assert ids(claim(backend)) == [] and record(backend, "c").state == "blocked"
    # a starts: it counts for 100 ms from its start, then c may be claimed (b still counts).
    backend.rate_started("a", first.claims[0].token)
    got: list[str] = []
    wait_until(lambda: got.extend(ids(claim(backend))) or got, timeout=10,
               message="room once a's start left the window")
    assert got == ["c"] and backend.now_ms() - claimed_at < 700
    # b and c not started: d waits until b's claim lapses with its first lease deadline.
    got = []
    wait_until(lambda: got.extend(ids(claim(backend))) or got, timeout=10,
               message="room once b lapsed")
    assert got == ["d"] and backend.now_ms() - asked_at >= 800


def test_a_lapsed_claim_is_not_counted_again_by_a_late_heartbeat(
        make_backend: Callable[..., Backend]) -> None:
    # A frozen worker's claim lapsed (not recovered yet); its late heartbeat renews the lease
    # but not its place in the window, whether or not a look at the window dropped it first:
    # the rule may not depend on when a store trims (found by tests/fast/model).
    backend = make_backend(lease_ms=600)
    for name in ("a", "b"):
        publish(backend, name, rate_window_ms=60_000, rate_group="t:", rate_limit=1)
    first = claim(backend)
    assert ids(first) == ["a"] and first.blocked == ["b"]
    lapses_at = backend.now_ms() + 600
    wait_until(lambda: backend.now_ms() > lapses_at + 5, timeout=10, message="a's lease lapsed")
    assert backend.heartbeat([(first.claims[0].job_id, first.claims[0].token)]) == [
        Verdict.RENEWED]
    # Within a's renewed lease: had the heartbeat revived its place, b would stay parked.
    maintain(backend)
    assert ids(claim(backend)) == ["b"]


def test_a_claim_not_started_counts_while_its_lease_is_renewed(
        make_backend: Callable[..., Backend]) -> None:
    # A worker prefetched a and b behind a long task and keeps renewing their leases: they
    # count in the window until they start, however long that takes (review of issue #16).
    backend = make_backend(lease_ms=400)
    for name in ("a", "b", "c"):
        publish(backend, name, rate_window_ms=100, **RATE)
    first = claim(backend)
    assert ids(first) == ["a", "b"] and first.blocked == ["c"]
    held = [(c.job_id, c.token) for c in first.claims]
    renewed_until = backend.now_ms() + 1200  # three leases
    while backend.now_ms() < renewed_until:
        assert backend.heartbeat(held) == [Verdict.RENEWED] * len(held)
        assert ids(claim(backend)) == [], "the window took c while a and b still counted"
        time.sleep(0.1)
    # They start: they count by their start time, and c follows once the window has passed.
    for job_id, token in held:
        backend.rate_started(job_id, token)
    got: list[str] = []
    wait_until(lambda: got.extend(ids(claim(backend))) or got, timeout=10,
               message="room once a's and b's starts left the window")
    assert got == ["c"]
