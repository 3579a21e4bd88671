"""Defect 1 of issue 12: the gevent and eventlet pools, under ``celery-plus worker`` and
plain ``celery worker``, on every store.

* The pool works: tasks run, and green tasks that wait overlap.
* The lease keeper is a real OS thread: a CPU-bound task longer than the lease (which never
  yields to the event loop) keeps its lease, so a second worker never runs it again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.deploy.matrix import pools

from . import dropin_fixtures
from .conftest import Worker, wait_until
from .proj import events

APP = dropin_fixtures.APP
client = dropin_fixtures.client  # the drop-in project's client app

#: The lease of the CPU-bound test (its task runs twice as long). 3 s, not 2: at CI's load (six
#: test processes on 2 cores) a gevent worker's keeper once went 1.6 s without a turn, gave
#: the 2 s lease up in time (exit 75) and the job ran again, as designed (CI at f31e87c).
VT_S = 3.0
POOLS = ["gevent", "eventlet"]
CLIS = ["celery-plus", "celery"]


def refused(broker_kind: str, pool: str, start_worker: Callable[..., Worker],
            cli: str) -> bool:
    """eventlet on PostgreSQL: psycopg 3 cannot wait cooperatively under eventlet, so the
    worker refuses to start, saying why (instead of stalling every green thread)."""
    if (broker_kind, pool) != ("postgres", "eventlet"):
        return False
    worker = start_worker(app=APP, pool=pool, cli=cli, ready=False)
    wait_until(lambda: worker.proc.poll() is not None, timeout=60, message="worker exits")
    assert "psycopg 3 does not cooperate with eventlet" in worker.log(), worker.log()
    return True



@pytest.mark.parametrize("cli", ["celery-plus"])  # the command that must patch first
@pytest.mark.parametrize("pool", POOLS)
def test_green_pool_runs_tasks_concurrently(
        client: Any, start_worker: Callable[..., Worker], prefix: str, pool: str,
        cli: str, broker_kind: str) -> None:
    if refused(broker_kind, pool, start_worker, cli):
        return
    worker = start_worker(app=APP, pool=pool, concurrency=10, cli=cli)
    assert client.tasks["proj.add"].delay(2, 3).get(timeout=30) == 5
    started = time.monotonic()
    results = [client.tasks["proj.sleep_mark"].delay(n, 1.5) for n in range(6)]
    assert sorted(r.get(timeout=60) for r in results) == list(range(6))
    # Six 1.5 s waits, one worker: they overlap unless the pool is blocked.
    assert time.monotonic() - started < 6 * 1.5, "green tasks did not overlap"
    # An idle worker's warm shutdown ends (its remote-control greenlet on SQLite used to spin
    # without yielding, so the greenlet stopping it never ran: killed after 20 s).
    worker.terminate()
    wait_until(lambda: worker.proc.poll() is not None, timeout=10,
               message=f"the {pool} worker to stop after SIGTERM")


@pytest.mark.parametrize("cli", CLIS)
@pools(*POOLS)
def test_a_cpu_bound_task_longer_than_the_lease_runs_once(
        client: Any, start_worker: Callable[..., Worker], prefix: str, pool: str,
        cli: str, broker_kind: str) -> None:
    if refused(broker_kind, pool, start_worker, cli):
        return
    env = {"PLUS_TEST_VT": str(VT_S)}
    green = start_worker(app=APP, pool=pool, concurrency=4, cli=cli, env=env)
    result = client.tasks["dropin.crunch"].delay(2 * VT_S)
    wait_until(lambda: events(prefix, "crunch_start"), timeout=30, message="crunch started")
    # A second worker ready to take the job over if the first one's lease lapses.
    other = start_worker(app=APP, pool="solo", env=env)
    assert result.get(timeout=60) > 0
    time.sleep(VT_S)  # long enough for a lapsed lease to have been recovered and rerun
    assert len(events(prefix, "crunch_start")) == 1, (
        f"{events(prefix)}\n--- {pool} worker ---\n{green.log()[-6000:]}"
        f"\n--- solo worker ---\n{other.log()[-3000:]}")
