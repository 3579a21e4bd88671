"""Conformance: batch publish (DESIGN §1.6 "a bulk publish for many jobs in one round trip").

Rules: ``publish_many`` returns one outcome per job, in order; each job is still its own
atomic publish decided in batch order — two jobs with one unique key in one batch: the first
is stored, the second is a duplicate of the first; a key held before the batch makes a
duplicate too; accepted jobs are claimed in batch order; a job of the batch continuing a
running job settles that claim as a single publish would; an empty batch does nothing. A
stored job takes the next place in line (its score's sequence number), one per job stored,
in a batch as alone; a duplicate or fenced publish takes none (``rules.score``).
"""

from __future__ import annotations

from celery_plus.model import rules
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


def test_a_job_takes_the_next_place_in_line_only_when_it_is_stored(backend: Backend) -> None:
    def place(job_id: str) -> int:
        return record(backend, job_id).score % rules.PRIORITY_FACTOR

    publish(backend, "holder", unique_lock="L", unique_window="running")
    first = place("holder")
    claim(backend)
    out = backend.publish_many([job("dup", unique_lock="L", unique_window="running"),
                                job("holder"), job("g", concurrency_group="g",
                                                   concurrency_limit=1), job("plain")])
    assert [(o.accepted, o.holder_id, o.fenced) for o in out] == [
        (False, "holder", False), (False, "holder", True), (True, None, False),
        (True, None, False)]
    assert (place("g"), place("plain")) == (first + 1, first + 2)
    # The same message again (a client retrying after a lost reply), alone: the next place.
    publish(backend, "g", "m-g", concurrency_group="g", concurrency_limit=1)
    assert place("g") == first + 3


def test_publish_many_of_no_jobs_does_nothing(backend: Backend) -> None:
    assert backend.publish_many([]) == []
    assert backend.size(Q) == 0 and backend.stats() == {}


def test_a_batch_mixing_plain_and_keyed_jobs_is_claimed_in_batch_order(
        backend: Backend) -> None:
    out = backend.publish_many([
        job("p1"), job("k1", unique_lock="K1", unique_window="pending"), job("p2"),
        job("g1", concurrency_group="g", concurrency_limit=5), job("p3", priority=0)])
    assert all(o.accepted for o in out)
    assert ids(claim(backend)) == ["p1", "k1", "p2", "g1", "p3"]


def test_an_id_twice_in_one_batch_is_published_twice_in_order(backend: Backend,
                                                               inspect: Inspector) -> None:
    out = backend.publish_many([
        NewJob(id="a", queue=Q, message="first", unique_lock="K", unique_window="pending"),
        NewJob(id="b", queue=Q, message="b"),
        NewJob(id="a", queue=Q, message="second")])
    assert [(o.job_id, o.accepted, o.holder_id) for o in out] == [
        ("a", True, None), ("b", True, None), ("a", True, None)]
    assert inspect.holds() == {}, "the replacement without a key frees the first one's key"
    assert [(c.job_id, c.message) for c in claim(backend).claims] == [
        ("b", b"b"), ("a", b"second")]
    backend.publish_many([
        NewJob(id="c", queue=Q, message="first"), NewJob(id="d", queue=Q, message="d"),
        NewJob(id="c", queue=Q, message="second", unique_lock="K", unique_window="pending")])
    assert inspect.holds() == {"K": "c"}
    assert [(c.job_id, c.message) for c in claim(backend).claims] == [
        ("d", b"d"), ("c", b"second")]


def test_a_batch_replaces_waiting_ids_and_is_fenced_by_running_ones(backend: Backend) -> None:
    publish(backend, "running")
    assert ids(claim(backend, max_jobs=1)) == ["running"]
    publish(backend, "waiting", "old")
    publish(backend, "waiting-2", "old")
    out = backend.publish_many([job("new"), job("waiting"), job("running")])
    assert [(o.job_id, o.accepted, o.fenced) for o in out] == [
        ("new", True, False), ("waiting", True, False), ("running", False, True)]
    assert [(c.job_id, c.message) for c in claim(backend).claims] == [
        ("waiting-2", b"old"), ("new", b"m-new"), ("waiting", b"m-waiting")]
    assert record(backend, "running").state == "running"


def test_a_batch_stores_rate_limits_as_single_publishes_do(backend: Backend) -> None:
    rate = {"rate_group": "t:", "rate_limit": 1, "rate_window_ms": 60_000}
    backend.publish_many([job("r0", **rate), job("r1", **rate), job("plain")])
    rec = record(backend, "r0")
    assert (rec.rate_group, rec.rate_limit, rec.rate_window_ms) == ("t:", 1, 60_000)
    result = claim(backend)
    assert ids(result) == ["r0", "plain"] and result.blocked == ["r1"]


def test_a_batch_keeps_quotes_backslashes_braces_and_unicode_as_sent(backend: Backend) -> None:
    odd = 'a "quoted" \\ back,slash {brace} NULL é中'
    out = backend.publish_many([NewJob(id=odd, queue=Q, message=odd, name=odd),
                                NewJob(id="NULL", queue=Q, message="")])
    assert [o.accepted for o in out] == [True, True]
    assert [(c.job_id, c.message) for c in claim(backend).claims] == [
        (odd, odd.encode()), ("NULL", b"")]
    assert record(backend, odd).name == odd
