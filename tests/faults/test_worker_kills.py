"""kill -9 of worker main processes and of busy pool processes, in a loop, while
replacements start. The jobs a dead process held come back after their lease (plus a maintenance
interval) and run once more — the only second runs allowed; nothing is lost, the
concurrency limit holds at every instant, and no hold or slot is left behind.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from .harness import MAINTENANCE_S, Deployment, check

STORES = ["redis", "postgres", "sqlite"]


def publish_mix(deployment: Deployment, jobs: int, seconds: float) -> None:
    """Plain jobs, jobs of two concurrency groups (limit 1 each) and unique jobs."""
    for n in range(jobs):
        if n % 5 == 1:
            deployment.publish_limited("a" if n % 2 else "b", f"l{n}", seconds)
        elif n % 5 == 3:
            deployment.publish("fault.unique", f"u{n}", seconds)
        else:
            deployment.publish("fault.work", f"w{n}", seconds)


def run_kill_loop(deployment: Deployment, rounds: int, jobs: int) -> None:
    workers = [deployment.start_worker(concurrency=2), deployment.start_worker(concurrency=2)]
    publish_mix(deployment, jobs, seconds=0.4)
    for n in range(rounds):
        time.sleep(0.8)
        victim = workers[n % len(workers)]
        if n % 2:
            deployment.kill_child(victim)
        else:
            deployment.kill(victim)
            workers[n % len(workers)] = deployment.start_worker(concurrency=2, wait=False)
        deployment.fault_ended = time.time()
    report = deployment.finish(f"{rounds} kills, lease {deployment.vt:.0f}s")
    check(report, recovery_within=deployment.vt + MAINTENANCE_S + 1.0)


@pytest.mark.parametrize("store", STORES)
def test_kill_9_of_workers_and_pool_processes_in_a_loop(
        deploy: Callable[..., Deployment], store: str) -> None:
    run_kill_loop(deploy("kill-9 loop", store, vt=3.0), rounds=4, jobs=40)


@pytest.mark.long
@pytest.mark.parametrize("store", STORES)
def test_kill_9_loop_long(deploy: Callable[..., Deployment], store: str) -> None:
    run_kill_loop(deploy("kill-9 loop-long", store, vt=10.0), rounds=40, jobs=600)
