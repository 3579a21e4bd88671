"""Acceptance line 9 of the foundation issue: Celery's own features over the plus transport.

9. "Canvas (chain, group, chord with the Redis result backend), AsyncResult.get(), revoke, time
   limits and `celery inspect ping` work on a celery-plus app over plus+redis://."

Also ``Task.replace`` (a continuation publishing the replacement under the running task's id)
gives the replacement's result, and prefork pool children publish retries and replacements
through their own store connections. Runs on each durable store (``broker_kind``: Redis,
SQLite and PostgreSQL).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
from celery import chain, chord, group

from celery_plus.model.store import Backend
from tests.inspectors import inspector_for

from .conftest import ROOT, Worker, wait_until
from .proj import events

TIMEOUT = 30


def _hostname(prefix: str, index: int = 0) -> str:
    """The node name the harness gives the index-th worker of a test."""
    return f"w{index}-{prefix}@{socket.gethostname()}"


def test_chain_passes_each_result_to_the_next(
    client: Any, start_worker: Callable[..., Worker]
) -> None:
    start_worker()
    add = client.tasks["proj.add"]
    result = chain(add.s(1, 2), add.s(3), add.s(4))()
    assert result.get(timeout=TIMEOUT) == 10
    assert result.parent.get(timeout=TIMEOUT) == 6
    assert result.parent.parent.get(timeout=TIMEOUT) == 3


def test_group_returns_the_list_of_results(
    client: Any, start_worker: Callable[..., Worker]
) -> None:
    start_worker(pool="prefork", concurrency=2)
    add = client.tasks["proj.add"]
    result = group(add.s(i, i) for i in range(6))()
    assert result.get(timeout=TIMEOUT) == [0, 2, 4, 6, 8, 10]
    assert result.successful()


def test_chord_calls_back_with_the_group_results(
    client: Any, start_worker: Callable[..., Worker], prefix: str
) -> None:
    start_worker(pool="prefork", concurrency=2)
    add, tsum = client.tasks["proj.add"], client.tasks["proj.tsum"]
    result = chord(add.s(i, i) for i in range(5))(tsum.s())
    assert result.get(timeout=TIMEOUT) == 20
    calls = events(prefix, "tsum")
    assert len(calls) == 1 and sorted(calls[0]["numbers"]) == [0, 2, 4, 6, 8]


def test_async_result_get_returns_values_and_raises_task_errors(
    client: Any, start_worker: Callable[..., Worker]
) -> None:
    start_worker()
    ok = client.tasks["proj.add"].delay(40, 2)
    bad = client.tasks["proj.fail"].delay("boom")
    assert client.AsyncResult(ok.id).get(timeout=TIMEOUT) == 42
    with pytest.raises(ValueError, match="boom"):
        client.AsyncResult(bad.id).get(timeout=TIMEOUT)
    assert client.AsyncResult(bad.id).state == "FAILURE"
    assert client.AsyncResult(ok.id).state == "SUCCESS"


def test_revoked_countdown_job_never_runs(
    client: Any, start_worker: Callable[..., Worker], prefix: str, view: Backend
) -> None:
    start_worker()
    mark = client.tasks["proj.mark"]
    revoked = mark.apply_async((1,), countdown=6)
    assert (inspector_for(view).job(revoked.id) or {}).get("st") == "scheduled"
    replies = client.control.revoke(revoked.id, reply=True, timeout=3, limit=1)
    assert any(_hostname(prefix) in reply for reply in replies), replies
    # Not yet due when revoked: still waiting in the store, not in the worker.
    assert (inspector_for(view).job(revoked.id) or {}).get("st") == "scheduled"
    # A sentinel due two seconds later: once it ran, the revoked job's time had come and gone.
    sentinel = mark.apply_async((2,), countdown=8)
    assert sentinel.get(timeout=TIMEOUT) == 2
    wait_until(lambda: client.AsyncResult(revoked.id).state == "REVOKED", timeout=10,
               message="revoked job marked REVOKED")
    assert [e["n"] for e in events(prefix, "mark")] == [2]
    wait_until(lambda: (inspector_for(view).job(revoked.id) or {}).get("st") == "completed",
               timeout=10, message="revoked job settled")
    assert inspector_for(view).lease_deadline(revoked.id) is None


def test_soft_time_limit_raises_inside_the_task(
    client: Any, start_worker: Callable[..., Worker], prefix: str, view: Backend
) -> None:
    start_worker(pool="prefork", concurrency=1)
    result = client.tasks["proj.soft_limited"].delay(15)
    assert result.get(timeout=TIMEOUT) == "soft-limit-caught"
    assert len(events(prefix, "soft_limit")) == 1
    wait_until(lambda: (inspector_for(view).job(result.id) or {}).get("st") == "completed",
               timeout=10, message="soft-limited job completed")


def test_celery_inspect_ping_cli_reaches_the_worker(
    start_worker: Callable[..., Worker], prefix: str
) -> None:
    start_worker()
    cmd = [sys.executable, "-m", "celery_plus.cli", "-A", "tests.deploy.e2e.proj", "inspect",
           "ping",
           "--timeout", "5"]
    proc = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "PLUS_TEST_PREFIX": prefix},
                          capture_output=True, text=True, timeout=60)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert _hostname(prefix) in output, output
    assert "pong" in output, output


def test_control_ping_returns_the_worker(
    client: Any, start_worker: Callable[..., Worker], prefix: str
) -> None:
    start_worker()
    replies = client.control.ping(timeout=3)
    assert replies == [{_hostname(prefix): {"ok": "pong"}}]


def test_task_replace_gives_the_replacement_result(
    client: Any, start_worker: Callable[..., Worker], prefix: str, view: Backend
) -> None:
    start_worker()
    result = client.tasks["proj.replaced"].delay(4, 5)
    assert result.get(timeout=TIMEOUT) == 9
    assert [e["id"] for e in events(prefix, "replaced")] == [result.id]
    record = wait_until(
        lambda: (r := inspector_for(view).job(result.id)) and r["st"] == "completed" and r,
        timeout=10, message="replaced job completed")
    assert record["name"] == "proj.add", record
    assert inspector_for(view).lease_deadline(result.id) is None
    # Inside a chain, the replacement's result flows on to the next task.
    chained = chain(client.tasks["proj.replaced"].s(1, 2), client.tasks["proj.add"].s(10))()
    assert chained.get(timeout=TIMEOUT) == 13


@pytest.mark.parametrize("pool", ["prefork", "threads"])
def test_a_task_replaced_by_a_canvas_completes_with_its_last_parts_result(
    client: Any, start_worker: Callable[..., Worker], prefix: str, view: Backend, pool: str
) -> None:
    # The canvas's last part inherits the replaced task's id and is published by the task
    # before it, typically before the replaced delivery's own ack reached the store: it
    # continues that claim (it carries the claim's lease token), it is not fenced away.
    inspect = inspector_for(view)
    start_worker(pool=pool, concurrency=4)
    by_chain = client.tasks["proj.replaced_by_canvas"].delay(4, 5, "chain")
    by_group = client.tasks["proj.replaced_by_canvas"].delay(1, 2, "group")
    assert by_chain.get(timeout=TIMEOUT) == 19
    assert by_group.get(timeout=TIMEOUT) == [3, 3]
    for task_id in (by_chain.id, by_group.id):
        record = wait_until(
            lambda task_id=task_id: (r := inspect.job(task_id)) and r["st"] == "completed" and r,
            timeout=10, message="replaced job completed")
        assert record["name"] != "proj.replaced_by_canvas", record
    assert sorted(e["id"] for e in events(prefix, "replaced")) == sorted(
        [by_chain.id, by_group.id])


@pytest.mark.parametrize("pool", ["gevent", "prefork"])
def test_replacements_start_although_the_replaced_delivery_has_not_settled_yet(
    client: Any, start_worker: Callable[..., Worker], view: Backend, pool: str
) -> None:
    # A replacement is claimed here under a newer token of the replaced job's id while the
    # replaced delivery's ack is still on its way: for that while this worker holds two
    # claims of one job. The store names a lost claim by its job id, so a heartbeat then
    # (a lease keeper renewing every turn makes one likely) reported the replaced claim lost
    # under the id both share, and the replacement was marked lost with it: on gevent it
    # did not start ("its lease was lost while it waited"), and with a lease longer than
    # the caller's wait the caller timed out (the compatibility suite's ``replace``
    # scenario on plus-redis/gevent). Nor is the replaced claim taken for a lost one: its
    # own run continued it, so no pool process is stopped for it (on prefork one was
    # SIGTERMed, whatever it ran by then: "succeeded before the worker was lost").
    inspect = inspector_for(view)
    worker = start_worker(pool=pool, concurrency=4,
                          env={"PLUS_TEST_HEARTBEAT": "0.01", "PLUS_TEST_VT": "60"})
    replaced, add = client.tasks["proj.replaced"], client.tasks["proj.add"]
    ids = []
    for n in range(40):
        direct = replaced.delay(n, 1)
        assert direct.get(timeout=TIMEOUT) == n + 1, worker.log()
        chained = chain(replaced.s(n, 2), add.s(10))()
        assert chained.get(timeout=TIMEOUT) == n + 12, worker.log()
        ids += [direct.id, chained.parent.id]
    log = worker.log()
    assert "not started: its lease was lost" not in log, log
    assert "was lost (taken over)" not in log and "stopping task" not in log, log
    for job_id in ids:
        record = wait_until(
            lambda job_id=job_id: (r := inspect.job(job_id)) and r["st"] == "completed" and r,
            timeout=10, message="replaced job completed")
        assert record["name"] == "proj.add", record


def test_prefork_children_publish_retries_and_replacements(
    client: Any, start_worker: Callable[..., Worker], prefix: str, view: Backend
) -> None:
    # Pool children publish (retry, Task.replace) through their own store connections.
    start_worker(pool="prefork", concurrency=2)
    flaky = client.tasks["proj.flaky"].delay("fk", 3)
    assert flaky.get(timeout=TIMEOUT) == 3
    attempts = [e["attempt"] for e in events(prefix, "attempt") if e.get("key") == "fk"]
    assert attempts == [1, 2, 3]
    record = wait_until(
        lambda: (r := inspector_for(view).job(flaky.id)) and r["st"] == "completed" and r,
        timeout=10, message="flaky completed")
    # One job throughout: each retry continued it (same id, history of the retried claims).
    assert [h["outcome"] for h in json.loads(record["hist"])] == ["retried", "retried"]
    replaced = client.tasks["proj.replaced"].delay(2, 3)
    assert replaced.get(timeout=TIMEOUT) == 5
    record = wait_until(
        lambda: (r := inspector_for(view).job(replaced.id)) and r["st"] == "completed" and r,
        timeout=10, message="replaced job completed")
    assert record["name"] == "proj.add", record
