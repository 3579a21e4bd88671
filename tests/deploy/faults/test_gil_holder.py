"""Issue #27: a task that holds the GIL cannot keep its run past its lease.

On a threads or gevent worker, a task in one long C call (here ``sum(range(n))``; a regular
expression backtracking for seconds is the same) starves every other thread of the process,
the lease keeper and the lease watch included: nothing renews the lease, nothing stops the run.
Before the guard process, another worker recovered the job once the lease lapsed and ran it
beside the first (2 jobs completed twice, at once, for 18.7 to 22.6 s). Now the worker's guard
process (``runtime/deadline_guard.py``), which the starved threads cannot hold up, kills the
worker before the lease lapses; the healthy worker B recovers the job and runs it alone.

Both variants are ``long`` (the README suite's time budget); the README suite keeps
``tests/fast/unit/test_deadline_guard.py``: a real process holding the GIL, killed by its guard.
"""

from __future__ import annotations

import signal
from collections.abc import Callable

import pytest

from tests.deploy.matrix import pools

from .harness import DIED, Deployment, check

LEASE_S = 4.0
#: Seconds of GIL held on this machine: several leases (about 10 s unloaded).
COUNT = 10**9


def gil_holder_beside_a_healthy_worker(deploy: Callable[..., Deployment], store: str,
                                       pool: str) -> None:
    deployment = deploy(f"GIL held ({pool})", store, vt=LEASE_S)
    with deployment.deaths_watched():
        a = deployment.start_worker(pool=pool, concurrency=2)
        deployment.publish("fault.hold_gil", "gil-1", COUNT)
        deployment.wait_running(1, timeout=30)
        deployment.start_worker(pool="prefork", concurrency=1)
        report = deployment.finish(f"A ({pool}) held the GIL", timeout=120)
    print(report.line(), deployment.overlapping_runs())
    assert not deployment.overlapping_runs(), (deployment.overlapping_runs(), a.log())
    check(report, allow_twice=(DIED,))
    first = min(deployment.runs(), key=lambda r: r.started)
    assert first.pid == a.proc.pid and first.ended is None, (first, a.log())
    assert a.proc.wait(timeout=10) == -signal.SIGKILL, a.log()
    assert "CRITICAL/LeaseGuard" in a.log(), a.log()



@pytest.mark.long
@pools("threads", "gevent")
@pytest.mark.parametrize("store", ["redis", "postgres", "sqlite"])
def test_a_worker_holding_the_gil_is_stopped_before_its_lease_lapses(
        deploy: Callable[..., Deployment], store: str, pool: str) -> None:
    gil_holder_beside_a_healthy_worker(deploy, store, pool)
