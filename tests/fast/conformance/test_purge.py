"""Conformance: queue size and purge (Celery's ``queue_declare`` message count and ``purge``).

Decision on what ``purge`` removes: Celery documents purge as "remove all messages waiting in
the queue". In celery-plus an eta/countdown/retry message never waits in a worker's memory: it
waits in the store as a ``scheduled`` job of its queue until due. So purge deletes every job of
the queue that no worker holds — ``enqueued``, ``blocked`` (parked behind a full concurrency
group) AND ``scheduled`` — and leaves ``running`` jobs (held by workers, like Celery's unacked
messages) and finished records alone. It returns how many jobs it deleted. Purge is one atomic
step and releases the non-TTL unique holds of the jobs it deleted (a pending or running window
key can be published again at once); TTL holds stay until their TTL ends (never released
early). ``size`` counts the ``enqueued`` jobs of the queue only.
"""

from __future__ import annotations

import pytest

from celery_plus.model.store import Backend, Settle
from tests.inspectors import Inspector

from .support import Q, claim, ids, publish, record, wait_until


def test_size_counts_the_enqueued_jobs_of_the_queue_only(backend: Backend) -> None:
    for i in range(3):
        publish(backend, f"j{i}")
    publish(backend, "later", eta_ms=backend.now_ms() + 60_000)
    publish(backend, "other", queue="other")
    claim(backend, max_jobs=1)
    assert backend.size(Q) == 2 and backend.size("other") == 1 and backend.size("none") == 0


def test_purge_deletes_the_waiting_jobs_of_the_queue_and_leaves_running_ones(
        backend: Backend, inspect: Inspector) -> None:
    publish(backend, "run", concurrency_group="g", concurrency_limit=1)
    assert ids(claim(backend)) == ["run"]
    publish(backend, "parked", concurrency_group="g", concurrency_limit=1)
    assert claim(backend).blocked == ["parked"]
    publish(backend, "ready")
    publish(backend, "ready2")
    publish(backend, "later", eta_ms=backend.now_ms() + 60_000)
    publish(backend, "elsewhere", queue="other")
    publish(backend, "elsewhere-later", queue="other", eta_ms=backend.now_ms() + 60_000)
    assert backend.purge(Q) == 4
    for gone in ("ready", "ready2", "parked", "later"):
        assert backend.record(gone) is None, gone
    assert backend.size(Q) == 0
    assert inspect.ids_in_state("blocked") == [] and inspect.blocked_groups() == set()
    assert inspect.ids_in_state("scheduled") == ["elsewhere-later"]
    assert record(backend, "run").state == "running"
    assert inspect.slot_holders("g") == {"run"}
    assert record(backend, "elsewhere").state == "enqueued" and backend.size("other") == 1
    assert backend.purge(Q) == 0


@pytest.mark.not_queue_scoped("one unique key held across two queues (per queue on a cluster)")
def test_purge_releases_the_unique_holds_of_the_jobs_it_deletes(backend: Backend,
                                                                inspect: Inspector) -> None:
    publish(backend, "r", unique_lock="R", unique_window="running")
    assert ids(claim(backend)) == ["r"]
    publish(backend, "p", unique_lock="P", unique_window="pending")
    publish(backend, "w", unique_lock="W", unique_window="running")
    publish(backend, "s", unique_lock="S", unique_window="running",
            eta_ms=backend.now_ms() + 60_000)
    publish(backend, "t", unique_lock="T", unique_window="ttl", unique_ttl_ms=60_000)
    publish(backend, "o", unique_lock="O", unique_window="pending", queue="other")
    assert inspect.holds() == {"R": "r", "P": "p", "W": "w", "S": "s", "T": "t", "O": "o"}
    assert backend.purge(Q) == 4
    # Released: the keys of deleted pending / running window jobs; a new job takes them.
    assert inspect.holds() == {"R": "r", "T": "t", "O": "o"}
    for key in ("P", "W", "S"):
        assert publish(backend, f"new-{key}", unique_lock=key, unique_window="running").accepted
    # Kept: the running job's hold, a TTL hold, another queue's hold.
    assert publish(backend, "dup-r", unique_lock="R", unique_window="running").holder_id == "r"
    assert publish(backend, "dup-t", unique_lock="T", unique_window="ttl",
                   unique_ttl_ms=60_000).holder_id == "t"
    assert publish(backend, "dup-o", unique_lock="O", unique_window="pending").holder_id == "o"


def test_a_purged_parked_job_is_not_unblocked_when_the_slot_frees(backend: Backend,
                                                                  inspect: Inspector) -> None:
    for name in ("a", "b", "c"):
        publish(backend, name, concurrency_group="g", concurrency_limit=1)
    a = claim(backend).claims[0]
    assert sorted(inspect.ids_in_state("blocked")) == ["b", "c"]
    assert backend.purge(Q) == 2
    backend.settle([Settle("a", a.token, "ack")])
    assert inspect.slot_holders("g") == set()
    assert ids(claim(backend)) == [] and backend.size(Q) == 0
    assert backend.record("b") is None and backend.record("c") is None
    publish(backend, "d", concurrency_group="g", concurrency_limit=1)
    assert ids(claim(backend)) == ["d"], "a purged job still holds the group"


def test_a_purged_scheduled_job_is_never_delivered(backend: Backend, inspect: Inspector) -> None:
    publish(backend, "soon", eta_ms=backend.now_ms() + 200)
    assert backend.purge(Q) == 1
    assert claim(backend).next_due is None
    assert inspect.ids_in_state("scheduled") == []
    publish(backend, "marker", eta_ms=backend.now_ms() + 300)
    # Once the marker (published later, due later) is claimable, "soon" would have been too.
    got = wait_until(lambda: ids(claim(backend)), timeout=10, message="marker due")
    assert got == ["marker"]
