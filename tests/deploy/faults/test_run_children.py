"""Issue #27: a run stopped for its lease takes the processes it started with it.

A task does its real work in a child process (``sleep``, the pid in the ledger). Worker A
reaches its store through a :class:`~tests.deploy.faults.proxy.FaultProxy`; worker B goes
direct. The link stalls; before the lease lapses A stops the run (prefork: the pool process
is killed; threads: the worker exits, code 75), and B, once the lease has lapsed, runs the
job. The oracle: **the first run's child is dead before B's run starts** (a watcher notes
when each child dies, every 20 ms), no two runs of the job overlap, nothing is lost.

Before ``runtime/process_tree.py``, the killed run's ``sleep`` ran on, handed to init, beside
B's run (the reviewer's: 7.75 s; this test: the child outlived B's start).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.support import wait_until

from .harness import DIED, Deployment, _alive, check
from .test_partition import FAST, LEASE_S

#: The first run's child: far longer than the test.
CHILD_S = 60.0
#: What a later run's child sleeps.
LATER_S = 0.2
#: How often the watcher looks at the children.
WATCH_S = 0.02


@contextlib.contextmanager
def children_watched(deployment: Deployment) -> Iterator[dict[int, float]]:
    """pid -> when it was first seen dead, of every child a run noted in the ledger."""
    died: dict[int, float] = {}
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(WATCH_S):
            for _, pid in deployment.ledger.children():
                if pid not in died and not _alive(pid):
                    died[pid] = time.time()

    thread = threading.Thread(target=watch, name="children watched", daemon=True)
    thread.start()
    try:
        yield died
    finally:
        stop.set()
        thread.join()


# The long run's (the README suite's 8 minutes): the fast tier's unit/test_worker_state.py,
# unit/test_deadline_guard.py and unit/test_thaw_guard.py stop real processes and their
# children by the same calls.
@pytest.mark.long
@pytest.mark.parametrize("pool", ["threads", "prefork"])
@pytest.mark.parametrize("store", ["redis", "postgres"])
def test_a_stopped_runs_child_process_is_dead_before_another_worker_runs_the_job(
        deploy: Callable[..., Deployment], store: str, pool: str) -> None:
    deployment = deploy("run's children", store, proxied=True, vt=LEASE_S, conf=FAST[store])
    proxy: Any = deployment.proxy  # type: ignore[attr-defined]
    direct = "plus+" + deployment.server.url  # type: ignore[attr-defined]
    with deployment.deaths_watched(), children_watched(deployment) as died:
        a = deployment.start_worker(pool=pool, concurrency=1)
        job = deployment.publish("fault.with_child", "child", CHILD_S, LATER_S)
        wait_until(lambda: deployment.ledger.children(), timeout=30, interval=0.05,
                   message="the run's child started")
        first_child = deployment.ledger.children()[0][1]
        deployment.start_worker(pool="prefork", concurrency=1, broker=direct)
        proxy.stall()
        wait_until(lambda: len(deployment.runs()) >= 2, timeout=30, interval=0.05,
                   message="another worker runs the job")
        proxy.resume()
        report = deployment.finish(f"A ({pool}) stalled, its run's child", timeout=60)
    print(report.line(), report.run_twice)
    first, second = deployment.runs()[:2]
    assert first.job == second.job == job
    assert first.pid != second.pid
    assert first_child in died, f"the first run's child {first_child} still runs"
    assert died[first_child] <= second.started, (
        f"the first run's child {first_child} died {died[first_child] - second.started:.2f} s "
        "after another worker's run of the job started")
    assert not deployment.overlapping_runs(), (deployment.overlapping_runs(), deployment.logs())
    check(report, allow_twice=(DIED,))
    if pool == "prefork":
        assert "killed 1 process(es) started below pool process" in a.log(), a.log()
    else:
        assert a.proc.wait(timeout=10) == 75, a.log()
        assert "started below this worker's process" in a.log(), a.log()
