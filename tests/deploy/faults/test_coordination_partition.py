"""Issue #27 in coordination mode: a run never outlives its claim in the coordination store.

The broker is RabbitMQ (``amqp://``, one queue per test) or a plain ``redis://`` one; the
extensions' claims live in a coordination store (Redis or PostgreSQL). Worker A reaches that
store through a :class:`~tests.deploy.faults.proxy.FaultProxy` (its broker link is direct);
worker B and the publisher go direct. A runs jobs of ``concurrency=1`` groups (a second job
of each group waits for the slot) and a unique job when its store link stalls — every byte
stops, every socket stays open — for one lease. A cannot renew its claims; before the
store's deadline its lease watch stops the runs (prefork: the pool process is killed;
threads: the worker exits, code 75); B recovers the lapsed claims once their leases ran out
and runs the jobs when the broker delivers them again. The oracle is the ledger the tasks
write (start, end; a killed run ends when its process died): **no two runs of one job, or of
one group, overlap; nothing is lost; every second run follows a stopped one.**

Before the change (the lease watch did not cover the coordination store's claims) A ran on
through the stall while B took the slots over: see docs/coordination.md for the figures.
"""

from __future__ import annotations

import signal
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from .harness import DIED, Deployment, check
from .proxy import FaultProxy


def partitioned(coordinated: Callable[..., tuple[Deployment, FaultProxy, dict[str, Any]]],
                store: str, broker: str, pool: str, lease_s: float, run_s: float,
                groups: int = 2, unique: bool = True) -> Deployment:
    """A (``pool``) runs ``groups`` jobs of ``concurrency=1`` groups (and a unique job) when
    its link to the coordination store stalls for one lease; a second job of each group
    waits for the slot; B goes direct. Returns the deployment after the assertions."""
    deployment, proxy, through_proxy = coordinated(store, broker, lease_s)
    with deployment.deaths_watched():
        # Room for more runs than it has: a job it claims after a slot lapsed starts at once.
        a = deployment.start_worker(pool=pool, concurrency=6, conf=through_proxy)
        tag = uuid.uuid4().hex[:4]
        for n in range(groups):
            deployment.publish_limited(f"g{n}-{tag}", f"g{n}-a", run_s)
        if unique:
            deployment.publish("fault.unique", "unique-a", run_s)
        deployment.wait_running(groups + int(unique), timeout=30)
        # The next job of each group waits for A's slot (given back by whichever worker
        # gets it, group full): once the slot lapses, B claims it.
        for n in range(groups):
            deployment.publish_limited(f"g{n}-{tag}", f"g{n}-b", 1.0)
        deployment.start_worker(pool="prefork", concurrency=3)
        proxy.stall()
        stalled = time.monotonic()
        time.sleep(lease_s)  # the fault itself: how long the link is silent
        proxy.resume()
        deployment.fault_ended = time.time()
        try:
            report = deployment.finish(f"A ({pool}) stalled "
                                       f"{time.monotonic() - stalled:.1f} s", timeout=90)
        except AssertionError as exc:  # say what ran at once too
            raise AssertionError(f"overlapping runs {deployment.overlapping_runs()}, over "
                                 f"the limit {deployment.report().over_limit_s}; "
                                 f"{exc}") from None
    print(report.line(), report.run_twice, deployment.overlapping_runs())
    print("\n".join(line for line in a.log().splitlines()
                    if "could not be renewed" in line or "not started" in line))
    assert not deployment.overlapping_runs(), (deployment.overlapping_runs(),
                                               deployment.logs())
    check(report, allow_twice=(DIED,))
    if pool != "prefork" and report.run_twice:
        assert a.proc.wait(timeout=10) == 75, a.log()
        assert "this worker exits now (code 75)" in a.log(), a.log()
    elif report.run_twice:
        assert "could not be renewed" in a.log(), a.log()
    return deployment


@pytest.mark.long
def test_a_coordinated_worker_cut_off_from_its_store_stops_before_its_successor_runs(
        coordinated: Callable[..., tuple[Deployment, FaultProxy, dict[str, Any]]]) -> None:
    """The smallest variant: RabbitMQ, a Redis coordination store, prefork, one group, a 2 s
    lease. About 17 s of two workers' start-up, the lease and the runs: over the README
    suite's 5 s per new deploy test, so ``long`` like the others."""
    partitioned(coordinated, "redis", "amqp", "prefork", lease_s=2.0, run_s=6.0, groups=1,
                unique=False)


@pytest.mark.long
@pytest.mark.parametrize("pool", ["prefork", "threads"])
@pytest.mark.parametrize("store", ["redis", "postgres"])
def test_a_coordinated_worker_partitioned_for_a_lease_never_runs_beside_its_successor(
        coordinated: Callable[..., tuple[Deployment, FaultProxy, dict[str, Any]]],
        store: str, pool: str) -> None:
    """RabbitMQ; two ``concurrency=1`` groups and a unique job of 16 s; a 6 s lease."""
    partitioned(coordinated, store, "amqp", pool, lease_s=6.0, run_s=16.0)


@pytest.mark.long
@pytest.mark.parametrize("store", ["redis", "postgres"])
def test_on_a_plain_redis_broker_too(
        coordinated: Callable[..., tuple[Deployment, FaultProxy, dict[str, Any]]],
        store: str) -> None:
    """A plain ``redis://`` broker (kombu's own layout, direct for both workers)."""
    partitioned(coordinated, store, "redis", "prefork", lease_s=6.0, run_s=16.0)


@pytest.mark.long
@pytest.mark.parametrize("pool", ["threads", "gevent"])
def test_a_coordinated_task_holding_the_gil_is_stopped_before_its_claim_lapses(
        coordinated: Callable[..., tuple[Deployment, FaultProxy, dict[str, Any]]],
        pool: str) -> None:
    """The guard process covers the coordination store's claims too: a task of a
    ``concurrency=1`` group in one long C call (``sum(range(10**9))``, about 10 s) starves
    the keeper and the watch of a threads or gevent worker; the guard kills the worker before
    the 4 s lease lapses, and B runs the job alone (RabbitMQ, a Redis coordination store)."""
    deployment, _, _ = coordinated("redis", "amqp", 4.0)
    with deployment.deaths_watched():
        a = deployment.start_worker(pool=pool, concurrency=2)
        deployment.publish_limited(f"gil-{uuid.uuid4().hex[:4]}", "gil-1", 10**9,
                                   task="fault.limited_hold_gil")
        try:
            deployment.wait_running(1, timeout=60)
        except AssertionError as exc:
            raise AssertionError(f"{exc}: {deployment.logs()}") from None
        deployment.start_worker(pool="prefork", concurrency=1)
        report = deployment.finish(f"A ({pool}) held the GIL", timeout=120)
    print(report.line(), deployment.overlapping_runs())
    assert not deployment.overlapping_runs(), (deployment.overlapping_runs(), a.log())
    check(report, allow_twice=(DIED,))
    first = min(deployment.runs(), key=lambda r: r.started)
    assert first.pid == a.proc.pid and first.ended is None, (first, a.log())
    assert a.proc.wait(timeout=10) == -signal.SIGKILL, a.log()
    assert "CRITICAL/LeaseGuard" in a.log(), a.log()


@pytest.mark.parametrize("store", ["redis", "postgres"])
def test_a_delivery_that_waited_in_a_prefork_pool_asks_the_store_before_it_starts(
        coordinated: Callable[..., tuple[Deployment, FaultProxy, dict[str, Any]]],
        store: str) -> None:
    """The start check in a pool process (no fault): a claimed delivery that waited behind
    another in a one-process prefork pool past its claim's sure share asks the coordination
    store from the pool process (a forked store client) and starts; each job runs once.
    The README suite's variant of this module (one store; 5.0 to 5.6 s)."""
    deployment, _, _ = coordinated(store, "amqp", 2.0)
    a = deployment.start_worker(pool="prefork", concurrency=1)
    tag = uuid.uuid4().hex[:4]
    deployment.publish_limited(f"x-{tag}", "first", 3.0)
    deployment.publish_limited(f"y-{tag}", "waited", 0.2)
    report = deployment.finish("prefork waited in the pool", timeout=60)
    check(report, allow_twice=())
    runs = {r.label: r for r in deployment.runs()}
    assert runs["waited"].started - runs["first"].started >= 2.0 * 0.8, runs
    assert "not started" not in a.log(), a.log()
