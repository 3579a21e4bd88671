"""A real worker on a local Redis Cluster (``plus+redis+cluster://``, 3 primaries and 3
replicas: tests/redis_cluster.py): tasks of two queues run, a unique duplicate coalesces, a
concurrency group holds, each queue's keys sit in its own slot, and a guarded task published
outside its home queue is refused (docs/redis-cluster.md)."""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from celery_plus.model.options import StoreOptions
from celery_plus.model.store import Backend
from celery_plus.send.queue_scope import QueueScopeError
from celery_plus.stores.redis.cluster import RedisClusterBackend
from tests.inspectors import inspector_for
from tests.redis_cluster import CLUSTER_GROUP, local_cluster

from . import proj
from .conftest import wait_until

pytestmark = CLUSTER_GROUP

#: Ports of the failover run's own cluster (the session's is not broken).
FAILOVER_PORT = 7140


@pytest.fixture
def broker_url(redis_cluster: str, monkeypatch: pytest.MonkeyPatch) -> str:
    url = f"plus+{redis_cluster}"
    monkeypatch.setenv("PLUS_TEST_BROKER", url)
    return url


@pytest.fixture
def view(broker_url: str, prefix: str) -> Iterator[Backend]:
    backend = RedisClusterBackend(broker_url.removeprefix("plus+"), StoreOptions(prefix=prefix))
    yield backend
    for key in list(backend.client.scan_iter(f"{prefix}:*", count=1000)):
        backend.client.delete(key)
    backend.close()


def test_a_worker_runs_a_cluster_store(client: Any, start_worker: Any, view: Any,
                                       prefix: str) -> None:
    inspect = inspector_for(view)
    start_worker("-Q", "celery,reports", pool="threads", concurrency=4)
    tasks = client.tasks
    added = [tasks["proj.add"].delay(i, i) for i in range(10)]
    marked = tasks["proj.mark"].apply_async((1,), queue="reports")
    # Running for 3 s: the duplicate below must be sent while it runs (a 1 s run was over
    # before a test process starved on a loaded machine saw it running).
    held = tasks["proj.unique_running"].delay("same", 3.0)
    wait_until(lambda: (inspect.job(held.id) or {}).get("st") == "running",
               message="the unique job running")
    duplicate = tasks["proj.unique_running"].delay("same", 3.0)
    slots = [tasks["proj.per_customer"].delay("c1", n, 0.3) for n in range(4)]

    assert [r.get(timeout=30) for r in added] == [2 * i for i in range(10)]
    assert marked.get(timeout=30) == 1
    assert held.get(timeout=30) == "same" and duplicate.id == held.id
    assert sorted(r.get(timeout=30) for r in slots) == [0, 1, 2, 3]
    running = [e["running"] for e in proj.events(prefix, "start") if "customer" in e]
    assert len(running) == 4 and max(running) <= 2
    # One queue, one slot: the queue's zset and its jobs' records share a hash tag.
    celery, reports = view.queue("celery"), view.queue("reports")
    slot = view.client.keyslot
    assert slot(celery.key("job", added[0].id)) == slot(celery.key("q", "celery"))
    assert slot(reports.key("job", marked.id)) == slot(reports.key("q", "reports"))
    assert inspect.job(marked.id)["st"] == "completed" and view.queues() == ["celery", "reports"]
    # The function library is on every primary (FUNCTION LOAD goes to all of them).
    library = celery.scripts.library
    for node in view.client.get_primaries():
        listed = view.client.get_redis_connection(node).function_list(library)
        assert len(listed) == 1, node.name
    with pytest.raises(QueueScopeError, match=r"proj\.unique_running"):
        tasks["proj.unique_running"].apply_async(("x", 0), queue="reports")


def test_a_retry_to_another_queue_is_refused_not_lost(client: Any, start_worker: Any,
                                                      view: Any, prefix: str) -> None:
    """``self.retry(queue="reports")`` cannot move a job between queues' slots: the delivery
    is rejected with QueueScopeError (Celery's retry turns a failed publish into a Reject),
    where its fenced publish stored nothing and the ack then completed the job, the retry
    lost."""
    inspect = inspector_for(view)
    start_worker("-Q", "celery,reports", pool="threads", concurrency=2)
    result = client.tasks["proj.x_retry_elsewhere"].delay()
    wait_until(lambda: (inspect.job(result.id) or {}).get("st") in ("completed", "failed"),
               message="the job's end")
    record = inspect.job(result.id)
    assert record["st"] == "failed", record
    assert "runs in queue 'celery'" in record.get("emsg", ""), record
    assert [e["retries"] for e in proj.events(prefix, "elsewhere")] == [0]


@pytest.mark.skipif(os.environ.get("PLUS_REDIS_CLUSTER_FULL") != "1",
                    reason="the failover run: PLUS_REDIS_CLUSTER_FULL=1")
def test_a_worker_drains_through_a_primary_failover(
        prefix: str, tmp_path: Path, start_worker: Any, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A real worker keeps draining while the primary of its queue's slot is killed (and comes
    back as a replica): every acknowledged task (``plus_redis_wait_replicas=1``) completes."""
    with local_cluster(tmp_path / "cluster", FAILOVER_PORT) as cluster:
        monkeypatch.setenv("PLUS_TEST_BROKER", cluster.url)
        start_worker(pool="threads", concurrency=4)
        app = proj.make_app(prefix, plus_redis_wait_replicas=1)
        view = RedisClusterBackend(cluster.url.removeprefix("plus+"), StoreOptions(prefix=prefix))
        victim = view.client.get_node_from_key(view.queue("celery").key("q", "celery")).port
        results: list[Any] = []
        ready_at_kill = -1
        try:
            for n in range(300):
                if n == 200:  # killed once the worker is draining the first 200
                    wait_until(lambda: sum(1 for r in results if r.ready()) >= 20,
                               timeout=30, message="the drain under way")
                    cluster.kill(victim)
                    ready_at_kill = sum(1 for r in results if r.ready())
                    wait_until(lambda: victim not in cluster.primaries() and cluster.healthy(),
                               timeout=60, message="the replica promoted")
                    cluster.restart(victim)  # a replica again, so WAIT 1 can be met
                deadline = time.monotonic() + 60
                while True:
                    try:
                        results.append(app.tasks["proj.sleep_mark"].delay(n, 0.02))
                        break
                    except Exception:  # not acknowledged (a failover under way): publish again
                        assert time.monotonic() < deadline, f"task {n} never acknowledged"
                        time.sleep(0.1)
            assert [r.get(timeout=60) for r in results] == list(range(300))
            with capsys.disabled():
                print(f"\nworker failover: {ready_at_kill} of 200 tasks done at the kill, "
                      "300 of 300 done after it")
            assert victim not in cluster.primaries() and 0 <= ready_at_kill < 200
        finally:
            view.close()
            app.close()
