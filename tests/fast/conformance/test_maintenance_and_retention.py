"""Conformance: maintenance and retention (DESIGN §3.5 maintenance pass, §3.6 retention).

Rules: maintenance runs once per interval across all workers; completed records are pruned
past their retention age and beyond their count bound (newest kept), dead letters by their own
bounds; while a group is full its parked jobs stay parked; slot entries whose job is no longer
running are dropped and one parked job is unblocked per free slot; a pass visits a bounded
number of groups and the next pass goes on with the rest.

The stale slot is made with the inspector's ``force_state`` (``tests/inspectors``), which changes a
job's state behind the store's back (as an operator's edit or a bug would).
"""

from __future__ import annotations

from collections.abc import Callable

from celery_plus.model.store import Backend, Settle
from tests.inspectors import Inspector, inspector_for

from .support import claim, ids, maintain, publish, record, wait_until


def finish(backend: Backend, job_id: str, action: str = "ack") -> None:
    """Publish, claim and settle one job."""
    publish(backend, job_id)
    got = claim(backend).claims[0]
    backend.settle([Settle(got.job_id, got.token, action)])


def test_maintenance_runs_once_per_interval_across_workers(
        make_backend: Callable[..., Backend]) -> None:
    one = make_backend(maintenance_interval_ms=60_000)
    two = make_backend(maintenance_interval_ms=60_000)
    assert one.maintain("w1") is True
    assert two.maintain("w2") is False
    assert one.maintain("w1") is False


def test_maintenance_prunes_completed_records_past_their_retention_age(
        make_backend: Callable[..., Backend]) -> None:
    backend = make_backend(retention=(2_000, 100_000, 600_000, 100_000))
    for name in ("a", "b"):
        finish(backend, name)
    finish(backend, "dead", "reject")
    maintain(backend)
    assert backend.record("a") is not None, "pruned before its retention"

    def pruned() -> bool:
        maintain(backend)
        return inspector_for(backend).ids_in_state("completed") == []

    wait_until(pruned, timeout=15, message="completed records pruned")
    assert backend.record("a") is None and backend.record("b") is None
    assert record(backend, "dead").state == "failed", "dead letter pruned by completed retention"


def test_maintenance_keeps_only_the_newest_records_within_the_count_bound(
        make_backend: Callable[..., Backend]) -> None:
    backend = make_backend(retention=(600_000, 2, 600_000, 1))
    for i in range(4):
        finish(backend, f"c{i}")
    finish(backend, "dead1", "reject")
    finish(backend, "dead2", "reject")
    maintain(backend)
    assert inspector_for(backend).ids_in_state("completed") == ["c2", "c3"]
    assert backend.record("c0") is None and backend.record("c1") is None
    assert record(backend, "c3").state == "completed"
    assert inspector_for(backend).ids_in_state("failed") == ["dead2"]
    assert backend.record("dead1") is None


def test_maintenance_leaves_parked_jobs_while_their_group_is_full(backend: Backend,
                                                                  inspect: Inspector) -> None:
    for name in ("a", "b"):
        publish(backend, name, concurrency_group="g", concurrency_limit=1)
    assert claim(backend).blocked == ["b"]
    maintain(backend)
    assert record(backend, "b").state == "blocked"
    assert inspect.slot_holders("g") == {"a"}


def test_maintenance_drops_stale_slots_and_unblocks_one_job_per_free_slot(
        backend: Backend, inspect: Inspector) -> None:
    for name in ("a", "b", "c"):
        publish(backend, name, concurrency_group="g", concurrency_limit=1)
    a = claim(backend).claims[0]
    assert record(backend, "b").state == "blocked"
    # The slot entry goes stale: its job left running without settling through the store.
    inspect.force_state("a", "canceled")
    maintain(backend)
    assert inspect.slot_holders("g") == set()
    assert record(backend, "b").state == "enqueued"
    assert record(backend, "c").state == "blocked"
    assert backend.settle([Settle("a", a.token, "ack")]) == []
    assert ids(claim(backend)) == ["b"]
    assert record(backend, "c").state == "blocked"


def test_maintenance_sweeps_more_groups_than_one_pass_takes(backend: Backend,
                                                            inspect: Inspector) -> None:
    # 60 groups with a stale slot each: one pass visits 50, the next one the rest.
    for n in range(60):
        group = f"g{n:02d}"
        publish(backend, f"{group}-a", concurrency_group=group, concurrency_limit=1)
        publish(backend, f"{group}-b", concurrency_group=group, concurrency_limit=1)
    claim(backend, max_jobs=200)
    assert len(inspect.ids_in_state("blocked")) == 60
    for n in range(60):
        inspect.force_state(f"g{n:02d}-a", "canceled")
    maintain(backend)
    assert len(inspect.ids_in_state("blocked")) == 10
    maintain(backend)
    assert inspect.ids_in_state("blocked") == []
    assert inspect.blocked_groups() == set()
