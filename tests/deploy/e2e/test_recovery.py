"""Acceptance line 4 of the foundation issue: recovery after a worker is killed.

"kill -9 of a worker with jobs in flight: a second worker completes every one after the lease
expires; none lost; the unique holds and slots of the dead worker's jobs are freed."
Runs on each durable store (``broker_kind``: Redis, SQLite and PostgreSQL).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celery_plus.model.store import Backend
from tests.inspectors import inspector_for

from .conftest import Worker, wait_until
from .proj import events

VT = {"PLUS_TEST_VT": "2"}


def _job_label(event: dict[str, Any]) -> str:
    """Which job an event belongs to (the tasks record their arguments)."""
    if "customer" in event:
        return f"c:{event['n']}"
    if "key" in event:
        return f"u:{event['key']}"
    return f"s:{event['n']}"


def test_killed_worker_jobs_complete_on_a_second_worker(
    client: Any, start_worker: Callable[..., Worker], prefix: str, view: Backend
) -> None:
    inspect = inspector_for(view)
    tasks = client.tasks
    published: dict[str, str] = {}  # label -> task id
    # Unique (running window) and concurrency-limited jobs first, so some are in flight on A.
    published["u:u0"] = tasks["proj.unique_running"].delay("u0", 1.0).id
    published["c:100"] = tasks["proj.per_customer"].delay("c1", 100, 1.0).id
    published["s:0"] = tasks["proj.sleep_mark"].delay(0, 1.0).id
    published["u:u1"] = tasks["proj.unique_running"].delay("u1", 1.0).id
    published["c:101"] = tasks["proj.per_customer"].delay("c1", 101, 1.0).id
    published["c:102"] = tasks["proj.per_customer"].delay("c1", 102, 1.0).id
    for n in range(1, 10):
        published[f"s:{n}"] = tasks["proj.sleep_mark"].delay(n, 1.0).id
    assert len(set(published.values())) == len(published) == 15
    holds = inspect.holds()
    assert sorted(holds.values()) == sorted([published["u:u0"], published["u:u1"]]), holds
    group = (inspect.job(published["c:100"]) or {}).get("cg")
    assert group == 'proj.per_customer:"c1"'

    worker_a = start_worker(pool="threads", concurrency=4, env=VT)
    pid_a = worker_a.proc.pid
    wait_until(lambda: len([e for e in events(prefix, "start") if e["pid"] == pid_a]) >= 4,
               timeout=30, message="four jobs started on worker A")
    worker_a.kill()

    started_a = {_job_label(e) for e in events(prefix, "start") if e["pid"] == pid_a}
    ended_a = {_job_label(e) for e in events(prefix, "end") if e["pid"] == pid_a}
    in_flight = started_a - ended_a
    assert in_flight, "worker A was killed with no job in flight"
    assert any(label.startswith(("u:", "c:")) for label in in_flight), in_flight
    # The dead worker's claims still hold their unique keys and slots until recovery.
    running = [label for label in in_flight
               if (inspect.job(published[label]) or {}).get("st") == "running"]
    assert running, "no in-flight job was left running by the killed worker"
    for label in running:
        task_id = published[label]
        assert inspect.lease_deadline(task_id) is not None, label
        if label.startswith("u:"):
            assert inspect.holder((inspect.job(task_id) or {})["uk"]) == task_id, label
        if label.startswith("c:"):
            assert task_id in inspect.slot_holders(group), (label, inspect.slot_holders(group))

    worker_b = start_worker(pool="threads", concurrency=4, env=VT)
    pid_b = worker_b.proc.pid

    def all_completed() -> bool:
        return all((inspect.job(tid) or {}).get("st") == "completed"
                   for tid in published.values())

    wait_until(all_completed, timeout=40, message="every job completed")

    ends: dict[str, list[dict[str, Any]]] = {}
    for e in events(prefix, "end"):
        ends.setdefault(_job_label(e), []).append(e)
    starts: dict[str, list[dict[str, Any]]] = {}
    for e in events(prefix, "start"):
        starts.setdefault(_job_label(e), []).append(e)
    assert set(ends) == set(published), f"lost jobs: {set(published) - set(ends)}"
    for label in in_flight:
        pids = [e["pid"] for e in starts[label]]
        assert pid_a in pids and pid_b in pids, (label, pids)
        assert [e["pid"] for e in ends[label]] == [pid_b], (label, ends[label])
    for label in set(published) - started_a:
        # Jobs A only prefetched (or never claimed) run on B, exactly once.
        assert [e["pid"] for e in starts[label]] == [pid_b], (label, starts[label])
        assert len(ends[label]) == 1, (label, ends[label])

    for label, task_id in published.items():
        expected = label.split(":", 1)[1]
        value = client.AsyncResult(task_id).get(timeout=10)
        assert str(value) == expected, (label, value)

    # Holds and slots of the dead worker's jobs are freed; recovery was reported.
    assert inspect.holds() == {}
    assert inspect.slot_holders(group) == set()
    assert inspect.ids_in_state("running") == []
    assert "recovered job" in worker_b.log(), worker_b.log()
    assert view.stats().get("recovered", 0) >= len(running), view.stats()
