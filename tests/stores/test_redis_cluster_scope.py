"""A Redis Cluster store keeps a job's record in its queue's slot: what cannot move between
queues is refused with a clear error, never dropped (docs/redis-cluster.md, "Per queue")."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from celery_plus.model.store import Backend, NewJob, Settle
from celery_plus.send.queue_scope import QueueScopeError
from tests.fast.conformance.stores import backends_on_one_store
from tests.redis_cluster import CLUSTER_GROUP

pytestmark = CLUSTER_GROUP


@pytest.fixture
def make(redis_cluster: str, tmp_path: Path) -> Iterator[Callable[..., Backend]]:
    with backends_on_one_store("redis-cluster", tmp_path) as opener:
        yield opener


def _publish(backend: Backend, queue: str, message: str, **fields: Any) -> Any:
    return backend.publish(NewJob(id="a", message=message, queue=queue, **fields))


def test_a_continuation_to_another_queue_is_refused_and_the_claim_kept(
        make: Callable[..., Backend]) -> None:
    """``self.retry(queue="other")`` on a cluster: the job's record cannot move to the other
    queue's slot, so the publish raises (Celery's retry then rejects the delivery,
    ``Reject(exc, requeue=False)``) instead of a silent no-op after which the ack completed the
    job and the retry was lost."""
    backend = make()
    _publish(backend, "jobs", "original")
    got = backend.claim(["jobs"], "w1", 1).claims[0]
    with pytest.raises(QueueScopeError, match=r"'a'.*'jobs'.*'other'"):
        _publish(backend, "other", "retry", lease_token=got.token)
    record = backend.record("a")
    assert record is not None and record.state == "running" and record.queue == "jobs"
    assert backend.size("other") == 0
    # A backend with no memory of the claim (another process) finds the job's queue.
    with pytest.raises(QueueScopeError):
        _publish(make(), "other", "retry", lease_token=got.token)
    assert backend.size("other") == 0
    # The continuation to the job's own queue still applies.
    out = _publish(backend, "jobs", "retry", lease_token=got.token)
    assert out.accepted and out.continued
    assert backend.settle([Settle("a", got.token, "ack")]) == []
    again = backend.claim(["jobs"], "w2", 1).claims
    assert [(c.job_id, c.message) for c in again] == [("a", b"retry")]


def test_maintenance_writes_the_queue_registry_again(make: Callable[..., Backend]) -> None:
    """The registry's SADD is not followed by WAIT: a failover of the global slot's primary can
    lose it while the queue's jobs (WAITed) survive. Then other processes (the admin, a
    publisher looking a job up by id) do not see the queue. A maintenance pass of a process
    that uses the queue writes its queues to the registry again."""
    worker: Any = make()
    assert worker.publish(NewJob(id="j", message="m", queue="lost-queue")).accepted
    worker.client.srem(worker.store.key("queues"), "lost-queue")  # the lost write
    assert make().record("j") is None
    assert worker.maintain("w")
    other: Any = make()
    assert other.queues() == ["lost-queue"]
    found = other.record("j")
    assert found is not None and found.queue == "lost-queue"


def _time_calls(node: Any) -> int:
    stats = node.redis_connection.info("commandstats")
    return int((stats.get("cmdstat_time") or {}).get("calls", 0))


def test_the_store_s_clock_is_read_on_the_global_scope_s_node(
        make: Callable[..., Backend]) -> None:
    """A worker record's ``at_ms`` is stamped by the node of the global scope's slot (the
    script writing it runs there); a publisher's look at the records (``stores/readers.py``)
    judges their age by ``now_ms``, so it reads TIME on that node, not on the client's
    default node, whose clock may differ."""
    backend: Any = make()
    client = backend.client
    for _ in range(50):  # a store whose global slot is not on the default node
        home = client.get_node_from_key(backend.store.prefix)
        if home.name != client.get_default_node().name:
            break
        backend = make()
        client = backend.client
    else:
        pytest.fail("every store's global slot was on the default node")
    primaries = client.get_primaries()
    before = {n.name: _time_calls(n) for n in primaries}
    backend.now_ms()
    after = {n.name: _time_calls(n) for n in primaries}
    assert {name for name in after if after[name] != before[name]} == {home.name}, \
        (before, after)
