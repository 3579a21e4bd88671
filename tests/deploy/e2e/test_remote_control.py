"""Remote control, events and ``rpc://`` results with real ``celery-plus worker`` processes, on
every store, as Celery's own integration suite uses them (issue 12: "Celery's own integration
suite"; issue 11 defect 5).

* A prefork worker busy with its only process still answers remote control at once, and a task
  revoked while it waits for a process never runs (Celery's event loop behaviour).
* ``inspect scheduled`` lists an ETA job waiting in the store, in Celery's format, under every
  worker consuming its queue.
* The command after ``cancel_consumer`` sees the queue gone.
* (``Reject(requeue=True)`` followed by a delivery flagged ``redelivered`` is the channel
  suite's ``test_a_requeued_message_is_delivered_again_flagged_redelivered``, on every store,
  and Celery's own ``test_tasks.py`` in ``python -m compat_suite.upstream``.)
* A command sent while a worker was down is not replayed to it when it starts, whether it was
  stopped or killed; a stopped worker's node binding goes at once, a killed one's lapses.
* An event receiver's binding goes with its process.
* ``rpc://`` results reach the caller and never touch the task's job record or unique key.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from celery_plus.model.store import Backend
from celery_plus.transport.channel import BINDING_SEP
from tests.inspectors import inspector_for

from . import proj
from .conftest import ROOT, Worker, wait_until
from .proj import events

TIMEOUT = 30


def node(prefix: str, index: int = 0) -> str:
    """The node name the harness gives the index-th worker of a test."""
    return f"w{index}-{prefix}@{socket.gethostname()}"


def bound(view: Backend, exchange: str) -> set[str]:
    return {b.split(BINDING_SEP)[-1] for b in view.bindings(exchange)}


def ping(client: Any, name: str) -> Any:
    """One ``inspect ping`` of ``name`` with Celery's default 1 s reply timeout."""
    return (client.control.inspect(destination=[name]).ping() or {}).get(name)


def test_a_busy_prefork_worker_answers_at_once_and_skips_what_was_revoked_meanwhile(
        client: Any, start_worker: Callable[..., Worker], prefix: str, view: Backend) -> None:
    start_worker(pool="prefork", concurrency=1)
    busy = client.tasks["proj.sleep_mark"].delay(1, 4)
    waiting = client.tasks["proj.mark"].delay(99)
    wait_until(lambda: events(prefix, "start"), timeout=TIMEOUT, message="the busy task")
    look = inspector_for(view)
    wait_until(lambda: (look.job(waiting.id) or {}).get("st") == "running", timeout=TIMEOUT,
               message="the second task prefetched")
    # The only process is busy and a prefetched task waits for it: the worker still answers.
    assert ping(client, node(prefix)) == {"ok": "pong"}
    inspect = client.control.inspect(destination=[node(prefix)])
    assert [r["id"] for r in inspect.active()[node(prefix)]] == [busy.id]
    assert [r["id"] for r in inspect.reserved()[node(prefix)]] == [waiting.id]
    client.control.revoke(waiting.id)
    assert busy.get(timeout=TIMEOUT) == 1
    wait_until(lambda: waiting.state == "REVOKED", timeout=TIMEOUT, message="REVOKED")
    assert [e["n"] for e in events(prefix, "mark")] == [], "a revoked task ran"


def test_inspect_scheduled_lists_an_eta_job_from_the_store(
        client: Any, start_worker: Callable[..., Worker], prefix: str) -> None:
    start_worker()
    eta = datetime.now(timezone.utc) + timedelta(seconds=120)
    result = client.tasks["proj.add"].apply_async((1, 2), {}, eta=eta)
    listed = client.control.inspect(destination=[node(prefix)]).scheduled()[node(prefix)]
    assert len(listed) == 1
    entry = listed[0]
    assert entry["eta"] == eta.strftime("%Y-%m-%dT%H:%M:%S.%f") + "+00:00"
    assert entry["priority"] == 6
    request = entry["request"]
    assert (request["id"], request["name"], request["type"]) == (
        result.id, "proj.add", "proj.add")
    assert (request["args"], request["kwargs"]) == ([1, 2], {})
    assert request["hostname"] == node(prefix)
    assert (request["time_start"], request["acknowledged"], request["worker_pid"]) == (
        None, False, None)
    assert request["delivery_info"] == {"exchange": "", "routing_key": "celery",
                                        "priority": 0, "redelivered": False}
    assert client.control.inspect(destination=[node(prefix)]).reserved()[node(prefix)] == []


def test_inspect_scheduled_lists_an_eta_job_under_every_worker_of_its_queue(
        client: Any, start_worker: Callable[..., Worker], prefix: str) -> None:
    """docs/compat.md: with several workers on a queue, each lists the job waiting in the store
    (plain Celery lists it once, under the worker that received it)."""
    start_worker()
    start_worker()
    result = client.tasks["proj.add"].apply_async((1, 2), {}, countdown=120)
    names = [node(prefix, 0), node(prefix, 1)]
    replies = client.control.inspect(destination=names).scheduled() or {}
    assert {name: [e["request"]["id"] for e in replies.get(name, [])] for name in names} == {
        name: [result.id] for name in names}, replies


def test_the_command_after_cancel_consumer_sees_the_queue_gone(
        client: Any, start_worker: Callable[..., Worker], prefix: str) -> None:
    """Celery applies ``add_consumer``/``cancel_consumer`` with ``call_soon``: on its event loop
    that runs before the next message is handled, so the next ``inspect active_queues`` never
    lists a cancelled queue (the compat suite's ``consumers`` scenario saw it listed)."""
    start_worker(pool="prefork", concurrency=1)  # Celery's event loop
    name, extra = node(prefix), f"{prefix}.extra"

    def queues() -> list[str]:
        reply = client.control.inspect(destination=[name], timeout=5).active_queues() or {}
        return sorted(q["name"] for q in reply.get(name, []))

    for _ in range(8):
        client.control.add_consumer(extra, destination=[name], reply=True, timeout=5)
        assert extra in queues()
        client.control.cancel_consumer(extra, destination=[name], reply=True, timeout=5)
        assert extra not in queues()


def test_a_command_sent_while_a_worker_was_down_is_not_replayed_to_it(
        client: Any, start_worker: Callable[..., Worker], prefix: str, view: Backend) -> None:
    name = node(prefix)
    same_name = f"--hostname=w0-{prefix}@%h"
    for how in ("killed", "stopped"):
        worker = start_worker(same_name)
        assert ping(client, name) == {"ok": "pong"}
        worker.kill() if how == "killed" else worker.stop()
        client.control.shutdown(destination=[name])  # nobody there to hear it
        restarted = start_worker(same_name)
        assert wait_until(lambda: ping(client, name), timeout=TIMEOUT,
                          message=f"the restarted worker ({how}) answering") == {"ok": "pong"}
        assert restarted.proc.poll() is None, f"replayed to the worker restarted after {how}"
        restarted.stop()


def test_a_stopped_workers_node_binding_goes_at_once_and_a_killed_ones_lapses(
        client: Any, start_worker: Callable[..., Worker], prefix: str, view: Backend) -> None:
    env = {"PLUS_TEST_CONTROL_EXPIRES": "1"}  # binding lifetime: max(2 x 1 s, 10 s)
    stopped, killed = start_worker(env=env), start_worker(env=env)
    queues = {f"{node(prefix, i)}.celery.pidbox" for i in (0, 1)}
    wait_until(lambda: queues <= bound(view, "celery.pidbox"), timeout=TIMEOUT,
               message="both node bindings")
    stopped.stop()
    wait_until(lambda: f"{node(prefix, 0)}.celery.pidbox" not in bound(view, "celery.pidbox"),
               timeout=5, message="the stopped worker's binding removed")
    killed.kill()
    wait_until(lambda: f"{node(prefix, 1)}.celery.pidbox" not in bound(view, "celery.pidbox"),
               timeout=TIMEOUT, message="the killed worker's binding lapsed")
    client.control.ping(timeout=0.5)
    for name in (node(prefix, 0), node(prefix, 1)):
        assert view.transient_size(f"{name}.celery.pidbox") == 0, f"{name} still gets pings"


RECEIVER = textwrap.dedent("""
    import sys
    from tests.deploy.e2e import proj
    app = proj.make_app(sys.argv[1], event_queue_expires=1.0)
    with app.connection_for_read() as conn:
        receiver = app.events.Receiver(conn, handlers={"*": lambda event: None})
        print("capturing", flush=True)
        receiver.capture(limit=None, timeout=None, wakeup=False)
""")


def test_an_event_receivers_binding_goes_with_its_process(
        client: Any, prefix: str, view: Backend, broker_url: str) -> None:
    # A receiver that closes cleanly unbinds at once.
    with client.connection_for_read() as conn:
        receiver = client.events.Receiver(conn, handlers={"*": lambda event: None})
        with receiver.consumer_context(wakeup=False):
            assert len(bound(view, "celeryev")) == 1
    assert bound(view, "celeryev") == set()
    # One that is killed stops receiving once its binding lapses (event_queue_expires=1 s:
    # a lifetime of max(2 x 1 s, 10 s)).
    proc = subprocess.Popen([sys.executable, "-c", RECEIVER, prefix], cwd=ROOT,
                            env={**os.environ, "PLUS_TEST_PREFIX": prefix},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: bound(view, "celeryev") or proc.poll() is not None, timeout=TIMEOUT,
                   message="the receiver's binding")
        assert proc.poll() is None, proc.stdout.read() if proc.stdout else ""
        (queue,) = bound(view, "celeryev")
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
        wait_until(lambda: not bound(view, "celeryev"), timeout=TIMEOUT,
                   message="the killed receiver's binding lapsed")
        with client.connection_for_write() as conn:
            client.events.Dispatcher(conn).send("worker-heartbeat")
        assert view.transient_size(queue) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


@pytest.fixture
def rpc_client(prefix: str, broker_url: str) -> Any:
    app = proj.make_app(prefix, result_backend="rpc://")
    assert type(app.backend).__name__ == "RPCBackend"
    yield app
    app.close()


def test_rpc_results_reach_the_caller_and_never_touch_the_tasks_job(
        rpc_client: Any, start_worker: Callable[..., Worker], prefix: str,
        view: Backend) -> None:
    inspect = inspector_for(view)
    start_worker(pool="prefork", concurrency=2, env={"PLUS_TEST_RESULTS": "rpc://"})
    add, unique = rpc_client.tasks["proj.add"], rpc_client.tasks["proj.unique_running"]
    results = [add.delay(i, i) for i in range(5)]
    assert [r.get(timeout=TIMEOUT) for r in results] == [0, 2, 4, 6, 8]
    first = unique.delay("k", 0)
    assert first.deduplicated is False and first.get(timeout=TIMEOUT) == "k"
    wait_until(lambda: (inspect.job(first.id) or {}).get("st") == "completed", timeout=TIMEOUT,
               message="the unique job completed")
    # Its result went to the caller's reply queue: the key is free, the next call runs.
    second = unique.delay("k", 0)
    assert second.deduplicated is False and second.id != first.id
    assert second.get(timeout=TIMEOUT) == "k"
    assert [e["key"] for e in events(prefix, "start")] == ["k", "k"]
    for result in [*results, first, second]:
        wait_until(lambda r=result: (inspect.job(r.id) or {}).get("st") == "completed",
                   timeout=TIMEOUT, message=f"job {result.id} completed")
    assert set(inspect.ids_in_state("completed")) == {r.id for r in [*results, first, second]}
    for state in ("enqueued", "scheduled", "running", "failed"):
        assert inspect.ids_in_state(state) == [], f"stray {state} jobs"


def test_celery_plus_status_lists_a_live_worker_and_exits_0(
        start_worker: Callable[..., Worker], prefix: str) -> None:
    """Issue #30, point 8, the other half: with a worker alive, ``celery-plus status`` is
    Celery's: the node answers, exit 0 (none alive: 69, tests/deploy/processes/test_cli.py)."""
    start_worker(pool="solo")
    done = subprocess.run(
        [sys.executable, "-m", "celery_plus.cli", "status", "-A", "tests.deploy.e2e.proj",
         "--timeout", "5"], cwd=ROOT, env={**os.environ, "PLUS_TEST_PREFIX": prefix},
        capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, (done.stdout, done.stderr)
    assert f"{node(prefix)}: OK" in done.stdout, done.stdout
