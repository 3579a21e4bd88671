"""Issue #27: a run never outlives its lease, whatever the link to the store does.

Worker A reaches its store through a :class:`~tests.deploy.faults.proxy.FaultProxy`; worker B
goes direct. A runs three jobs (two ``concurrency=1`` groups and a unique job) when its link
stalls — every byte stops both ways, every socket stays open — for half, one or three
leases. A cannot renew; before the store's deadline it stops the runs itself (prefork: the
pool process is killed; threads: the worker exits, code 75), and B, once the leases have
lapsed, recovers the jobs and runs them. The oracle is the ledger the tasks write (start,
end; a killed run ends when its process died): **no two runs of one job, or of one group,
overlap; nothing is lost; every second run follows a stopped one.**

Before the lease watch (``leases/deadline.py``), a 15 s stall under a 6 s lease ran 2 of 2 jobs
twice at once, for 8.8 to 9.1 s each.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from tests.deploy.matrix import pools

from .harness import DIED, Deployment, check

LEASE_S = 6.0
#: Short reply bounds, so a stalled call gives up well within a lease.
FAST = {"redis": {"broker_transport_options": {"socket_timeout": 2.0,
                                               "socket_connect_timeout": 1.0}},
        "postgres": {"plus_pg_reply_timeout": 2.0, "plus_pg_connect_timeout": 1.0}}


def partitioned_worker(deploy: Callable[..., Deployment], store: str, pool: str,
                       leases: float, run_s: float) -> None:
    deployment = deploy(f"partition {leases:g}x lease", store, proxied=True, vt=LEASE_S,
                        conf=FAST[store])
    proxy: Any = deployment.proxy  # type: ignore[attr-defined]
    direct = "plus+" + deployment.server.url  # type: ignore[attr-defined]
    with deployment.deaths_watched():
        a = deployment.start_worker(pool=pool, concurrency=3)
        deployment.publish_limited("g1", "g1-a", run_s)
        deployment.publish_limited("g2", "g2-a", run_s)
        deployment.publish("fault.unique", "unique-a", run_s)
        deployment.wait_running(3, timeout=30)
        deployment.start_worker(pool="prefork", concurrency=3, broker=direct)
        proxy.stall()
        stalled = time.monotonic()
        time.sleep(leases * LEASE_S)  # the fault itself: how long the link is silent
        proxy.resume()
        deployment.fault_ended = time.time()
        report = deployment.finish(f"A ({pool}) stalled {time.monotonic() - stalled:.1f} s",
                                   timeout=90)
    print(report.line(), report.run_twice)
    assert not deployment.overlapping_runs(), (deployment.overlapping_runs(), deployment.logs())
    check(report, allow_twice=(DIED,))
    if pool != "prefork" and report.run_twice:
        assert a.proc.wait(timeout=10) == 75, a.log()
        assert "this worker exits now (code 75)" in a.log(), a.log()
    elif report.run_twice:
        assert "could not be renewed" in a.log(), a.log()


@pytest.mark.parametrize("store", ["redis", "postgres"])
def test_a_worker_partitioned_for_a_lease_never_runs_beside_its_successor(
        deploy: Callable[..., Deployment], store: str) -> None:
    """The README suite's variant: prefork (its pool process is killed)."""
    partitioned_worker(deploy, store, "prefork", leases=1.0, run_s=16.0)


@pytest.mark.long
@pytest.mark.parametrize("store", ["redis", "postgres"])
def test_a_threads_worker_partitioned_for_a_lease_exits_before_its_successor_runs(
        deploy: Callable[..., Deployment], store: str) -> None:
    """Threads (the worker exits, code 75): the long run's (measured in docs/reliability.md
    with the prefork variant, on both stores)."""
    partitioned_worker(deploy, store, "threads", leases=1.0, run_s=16.0)


@pytest.mark.long
@pools("prefork", "threads")
@pytest.mark.parametrize("store", ["redis", "postgres"])
@pytest.mark.parametrize("leases", [0.5, 3.0])
def test_a_worker_partitioned_for_half_or_three_leases(
        deploy: Callable[..., Deployment], store: str, pool: str, leases: float) -> None:
    partitioned_worker(deploy, store, pool, leases=leases, run_s=leases * LEASE_S + 6.0)
