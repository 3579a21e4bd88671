"""Conformance: batch publish (DESIGN §1.6 "a bulk publish for many jobs in one round trip").

Rules: ``publish_many`` returns one outcome per job, in order; each job is still its own
atomic publish decided in batch order — two jobs with one unique key in one batch: the first
is stored, the second is a duplicate of the first; a key held before the batch makes a
duplicate too; accepted jobs are claimed in batch order; a job of the batch continuing a
running job settles that claim as a single publish would; an empty batch does nothing.
"""

from __future__ import annotations

from celery_plus.model.store import Backend, NewJob, Settle
from tests.inspectors import Inspector

from .support import Q, claim, ids, publish, record


def job(job_id: str, **fields: object) -> NewJob:
    return NewJob(id=job_id, queue=Q, message=f"m-{job_id}", **fields)  # type: ignore[arg-type]


def test_publish_many_returns_one_outcome_per_job_in_order(backend: Backend,
                                                           inspect: Inspector) -> None:
    jobs = [job("a", unique_lock="L", unique_window="running"),
            job("b", unique_lock="L", unique_window="running"),
            job("c", priority=1),
            job("d", eta_ms=backend.now_ms() + 60_000)]
    out = backend.publish_many(jobs)
    assert [(o.job_id, o.accepted, o.holder_id, o.state) for o in out] == [
        ("a", True, None, "enqueued"), ("b", False, "a", ""), ("c", True, None, "enqueued"),
        ("d", True, None, "scheduled")]
    assert sorted(inspect.ids_in_state("enqueued")) == ["a", "c"]
    assert inspect.ids_in_state("scheduled") == ["d"]
    assert backend.record("b") is None


def test_publish_many_decides_uniqueness_per_job_in_batch_order(backend: Backend,
                                                                inspect: Inspector) -> None:
    publish(backend, "old", unique_lock="K0", unique_window="pending")
    out = backend.publish_many([
        job("x1", unique_lock="K1", unique_window="pending"),
        job("x2", unique_lock="K1", unique_window="pending"),
        job("y1", unique_lock="K0", unique_window="pending"),
        job("z1", unique_lock="K2", unique_window="ttl", unique_ttl_ms=60_000),
        job("z2", unique_lock="K2", unique_window="ttl", unique_ttl_ms=60_000),
        job("x3", unique_lock="K1", unique_window="pending"),
    ])
    assert [(o.job_id, o.accepted, o.holder_id) for o in out] == [
        ("x1", True, None), ("x2", False, "x1"), ("y1", False, "old"), ("z1", True, None),
        ("z2", False, "z1"), ("x3", False, "x1")]
    assert inspect.holds() == {"K0": "old", "K1": "x1", "K2": "z1"}
    assert backend.stats().get("deduplicated") == 4
    assert ids(claim(backend)) == ["old", "x1", "z1"]


def test_publish_many_continues_a_running_job_like_a_single_publish(backend: Backend,
                                                                    inspect: Inspector) -> None:
    publish(backend, "a", concurrency_group="g", concurrency_limit=1)
    first = claim(backend).claims[0]
    out = backend.publish_many([job("a", concurrency_group="g", concurrency_limit=1,
                                    lease_token=first.token), job("b")])
    assert [(o.job_id, o.accepted, o.continued) for o in out] == [
        ("a", True, True), ("b", True, False)]
    assert inspect.slot_holders("g") == set()
    assert backend.settle([Settle("a", first.token, "ack")]) == [], "old delivery not fenced"
    again = claim(backend).claims
    assert [(c.job_id, c.message) for c in again] == [("a", b"m-a"), ("b", b"m-b")]
    assert again[0].token > first.token
    assert record(backend, "a").state == "running"


def test_publish_many_of_no_jobs_does_nothing(backend: Backend) -> None:
    assert backend.publish_many([]) == []
    assert backend.size(Q) == 0 and backend.stats() == {}
