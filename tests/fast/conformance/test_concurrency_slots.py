"""Conformance: concurrency slots and blocking (DESIGN §3.4).

Rules: a slot is taken atomically with the claim — no two workers both get the last free slot;
a job whose group is full is parked (``blocked``), never blocks jobs of other groups behind it,
and is made claimable again, oldest first and keeping its place in line, when a slot frees;
every exit of a claim frees its slot (ack, fail, requeue, release, lease recovery,
continuation).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from celery_plus.model.store import Backend, Settle
from tests.inspectors import Inspector, inspector_for

from .support import claim, ids, publish, record, wait_until


def test_slot_is_taken_with_the_claim_and_a_full_group_parks_the_job(
        make_backend: Callable[..., Backend]) -> None:
    one, two = make_backend(), make_backend()
    inspect = inspector_for(one)
    for i in range(3):
        publish(one, f"g{i}", concurrency_group="g", concurrency_limit=2)
    result = claim(one, max_jobs=3)
    assert ids(result) == ["g0", "g1"] and result.blocked == ["g2"]
    assert inspect.slot_holders("g") == {"g0", "g1"}
    assert record(one, "g2").state == "blocked"
    assert inspect.ids_in_state("blocked") == ["g2"] and inspect.ids_in_state("enqueued") == []
    assert inspect.blocked_groups() == {"g"}
    assert one.stats().get("blocked") == 1
    # Another worker sees no free slot either.
    publish(two, "g3", concurrency_group="g", concurrency_limit=2)
    result = claim(two, worker="w2")
    assert ids(result) == [] and result.blocked == ["g3"]
    assert inspect.slot_holders("g") == {"g0", "g1"}


def test_a_parked_job_does_not_block_other_groups(backend: Backend, inspect: Inspector) -> None:
    publish(backend, "g1", concurrency_group="g", concurrency_limit=1)
    publish(backend, "g2", concurrency_group="g", concurrency_limit=1)
    publish(backend, "g3", concurrency_group="g", concurrency_limit=1)
    publish(backend, "h1", concurrency_group="h", concurrency_limit=1)
    publish(backend, "free")
    assert ids(claim(backend, max_jobs=1)) == ["g1"]
    result = claim(backend, max_jobs=2)
    assert ids(result) == ["h1", "free"]
    assert result.blocked == ["g2", "g3"]
    assert inspect.slot_holders("h") == {"h1"}


@pytest.mark.cluster_smoke
def test_a_freed_slot_unblocks_the_oldest_parked_job_which_keeps_its_place(
        backend: Backend, inspect: Inspector) -> None:
    for name in ("a", "b", "c"):
        publish(backend, name, concurrency_group="g", concurrency_limit=1)
    a = claim(backend, max_jobs=1).claims[0]
    assert claim(backend).blocked == ["b", "c"]
    publish(backend, "later")
    backend.settle([Settle("a", a.token, "ack")])
    assert record(backend, "b").state == "enqueued"
    assert record(backend, "c").state == "blocked"
    # b keeps its place in line, ahead of a job published after it.
    b = claim(backend, max_jobs=1).claims[0]
    assert b.job_id == "b"
    assert ids(claim(backend, max_jobs=1)) == ["later"]
    backend.settle([Settle("b", b.token, "reject")])  # a dead letter frees the slot too
    assert record(backend, "c").state == "enqueued"
    assert ids(claim(backend)) == ["c"]
    assert inspect.ids_in_state("blocked") == []
    assert inspect.blocked_groups() == set()


def test_every_exit_of_a_claim_frees_its_slot(make_backend: Callable[..., Backend]) -> None:
    backend = make_backend(lease_ms=150)
    exits: dict[str, Callable[[str, int], Any]] = {
        "ack": lambda i, t: backend.settle([Settle(i, t, "ack")]),
        "fail": lambda i, t: backend.settle([Settle(i, t, "fail", {"reason": "task failed"})]),
        "requeue": lambda i, t: backend.settle([Settle(i, t, "requeue")]),
        "release": lambda i, t: backend.settle([Settle(i, t, "release")]),
        "recovery": lambda i, t: wait_until(backend.recover, timeout=10, message="recovery"),
        "continuation": lambda i, t: publish(backend, i, concurrency_group="g-continuation",
                                             concurrency_limit=1, lease_token=t),
    }
    for name, leave in exits.items():
        group = f"g-{name}"
        publish(backend, f"{group}-a", concurrency_group=group, concurrency_limit=1)
        got = claim(backend, max_jobs=1).claims[0]
        assert inspector_for(backend).slot_holders(group) == {got.job_id}
        leave(got.job_id, got.token)
        assert inspector_for(backend).slot_holders(group) == set(), name
        if record(backend, got.job_id).state == "enqueued":
            claimed = claim(backend, max_jobs=1).claims[0]
            backend.settle([Settle(claimed.job_id, claimed.token, "ack")])
        assert inspector_for(backend).ids_in_state("running") == [], name


def test_blocked_groups_forget_a_group_whose_parked_job_was_published_again(
        backend: Backend, inspect: Inspector) -> None:
    publish(backend, "a", concurrency_group="g", concurrency_limit=1)
    publish(backend, "b", concurrency_group="g", concurrency_limit=1)
    assert claim(backend).blocked == ["b"]
    assert inspect.blocked_groups() == {"g"}
    publish(backend, "b", "again, without a group")  # the same id replaces its message
    assert record(backend, "b").state == "enqueued"
    assert inspect.blocked_groups() == set(), "a group no job waits for is listed"


def test_blocked_groups_are_concurrency_groups_only(backend: Backend, inspect: Inspector) -> None:
    # Jobs parked by a full rate window wait for no slot: their groups (or none) are not
    # listed as groups having jobs blocked on their slots.
    rate = {"rate_group": "t:", "rate_limit": 1, "rate_window_ms": 60_000}
    publish(backend, "r0", **rate)
    publish(backend, "r1", **rate)
    publish(backend, "r2", concurrency_group="h", concurrency_limit=5, **rate)
    result = claim(backend)
    assert ids(result) == ["r0"] and result.blocked == ["r1", "r2"]
    assert inspect.blocked_groups() == set()
