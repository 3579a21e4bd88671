"""``SIGSTOP`` of a coordinated prefork worker: of its own process alone, or of all of it.

Coordination mode (a RabbitMQ broker; the extensions' claims in a Redis or PostgreSQL
coordination store): worker A (prefork, one process, one delivery prefetched at a time) runs
a job of a ``concurrency=1`` group, longer than the lease; a second job of the group waits
for the slot on worker B (blocked, given back to the broker and tried again every
``plus_coordination_retry_delay``). Then A's own process alone stops (a debugger,
``SIGSTOP`` of its pid) for longer than the lease, while its pool process runs the job on.
The worker's coordination keeper lives in the stopped process; the pool process renews the
claim of the task it runs itself (``worker/thaw_guard.py``), so the claim never lapses and B
gets the slot only once A's run ended. The oracle is the ledger the tasks write (start, end):
**the group never runs two jobs at once, nothing runs twice, nothing is lost.**

Frozen as a whole instead (``SIGSTOP`` of its process group) past the lease, A's claim
lapses and B runs the group's second job; A thaws while it runs. A's pool process asks the
coordination store as it thaws, before its task's code runs again, and holds the task until
A's keeper stops it: the stale run's code never runs again beside B's.

Before the pool process kept coordination claims (renewal and thaw check), A's claim lapsed
while its run went on and B ran the second job beside it; and a thawed pool process's task
ran on until A's keeper stopped it: docs/coordination.md gives the figures.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.support import wait_until

from .harness import FROZE, MAINTENANCE_S, Deployment, Worker, check
from .ledger import Run
from .proxy import FaultProxy

#: The lease (the heartbeat interval is a third of it).
LEASE_S = 2.0
#: How long A's run goes on after its worker's process runs again.
RUNS_ON_S = 1.0
#: How long into B's run of the group's next job a frozen A thaws.
THAWED_INSIDE_S = 0.3


def _main_process_stopped(coordinated: Callable[..., tuple[Deployment, FaultProxy,
                                                           dict[str, Any]]],
                          store: str, folder: Path) -> None:
    deployment, _, _ = coordinated(store, "amqp", LEASE_S, "coordinated main process stopped")
    # Past the lease, B's maintenance and B's next try at the slot (given back for
    # ``plus_coordination_retry_delay``, 0.5 s, jittered up to half as much again).
    freeze_s = LEASE_S + 2 * MAINTENANCE_S + 1.5
    a, pool_pid, marker = _first_running_second_waiting(deployment, folder)
    with deployment.deaths_watched():
        frozen_at = time.time()
        with deployment.frozen(a, main_only=True):
            time.sleep(freeze_s)
        thawed_at = deployment.fault_ended = time.time()
        time.sleep(RUNS_ON_S)  # A's own keeper and lease watch look at the claim again
        marker.touch()
        report = deployment.finish(f"A's own process stopped {thawed_at - frozen_at:.1f} s, "
                                   f"lease {LEASE_S:.0f} s, its prefork pool running",
                                   timeout=60)
    print(report.line(), deployment.overlapping_runs())
    runs = {r.label: r for r in deployment.runs()}
    assert not deployment.overlapping_runs(), deployment.overlapping_runs()
    check(report, allow_twice=(), overlap_s=0.0)
    # The first job ran on through the stop in A's pool process, to its end; the second
    # started on B after it.
    first, later = runs["first"], runs["second"]
    assert first.pid == pool_pid and not first.stopped, runs
    assert first.ended is not None and first.ended >= thawed_at + RUNS_ON_S, runs
    assert later.pid != pool_pid and later.started >= first.ended, runs


def _whole_worker_frozen(coordinated: Callable[..., tuple[Deployment, FaultProxy,
                                                          dict[str, Any]]],
                         store: str, folder: Path) -> None:
    deployment, _, _ = coordinated(store, "amqp", LEASE_S, "coordinated worker frozen")
    a, pool_pid, marker = _first_running_second_waiting(deployment, folder)
    with deployment.deaths_watched():
        deployment.note_in_flight({a.proc.pid, *a.children()})
        with deployment.frozen(a):
            # The claim lapses, B's maintenance frees the slot, B runs the second job.
            deployment.wait_running(2, prefix="", timeout=LEASE_S + 2 * MAINTENANCE_S + 10)
            time.sleep(THAWED_INSIDE_S)
        deployment.fault_ended = time.time()
        # A's pool process holds its task as it thaws; A's keeper learns the claim was lost
        # and stops it.
        try:
            wait_until(lambda: _run(deployment, "first", pool_pid).ended is not None,
                       timeout=10, interval=0.05, message="A's stale run stopped")
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{a.log()[-5000:]}") from None
        marker.touch()
        report = deployment.finish("A frozen whole past its lease, then thawed while B ran "
                                   "the group's next job", timeout=60)
    print(report.line(), deployment.overlapping_runs())
    # Stopped without its code running again (the thaw check held it until A's SIGTERM,
    # which may come while the store is still being asked).
    stale = _run(deployment, "first", pool_pid)
    assert stale.stopped and stale.resumed is None, (stale, a.log())
    check(report, allow_twice=(FROZE,), overlap_s=0.0)


def _first_running_second_waiting(deployment: Deployment, folder: Path
                                  ) -> tuple[Worker, int, Path]:
    """A runs the group's first job; B has received the second, which waits for the slot.
    Returns A, the pid of A's pool process running the first job, and the marker that lets
    both jobs end (each runs until it exists)."""
    # One delivery at a time: A holds the running one, so the broker hands the second to B.
    a = deployment.start_worker(pool="prefork", concurrency=1,
                                conf={"worker_prefetch_multiplier": 1})
    group = f"g-{uuid.uuid4().hex[:4]}"
    marker = folder / "runs-may-end"
    _publish_until(deployment, group, "first", marker)
    deployment.wait_running(1, prefix="first")
    pool_pid = next(r.pid for r in deployment.runs() if r.label == "first")
    second = _publish_until(deployment, group, "second", marker)  # the same task: its group
    b = deployment.start_worker(pool="prefork", concurrency=1)
    wait_until(lambda: second in b.log(), timeout=30, interval=0.05,
               message="B received the second job")
    return a, pool_pid, marker


def _publish_until(deployment: Deployment, group: str, label: str, marker: Path) -> str:
    """A job of concurrency group ``group`` that runs until ``marker`` exists."""
    job_id = str(deployment.app.send_task("fault.limited_until",
                                          (group, label, str(marker), 60.0)).id)
    deployment.note_published(label, job_id)
    return job_id


def _run(deployment: Deployment, label: str, pid: int) -> Run:
    return next(r for r in deployment.runs() if r.label == label and r.pid == pid)


@pytest.mark.long
@pytest.mark.parametrize("store", ["redis", "postgres"])
def test_a_coordinated_worker_whose_own_process_stops_keeps_the_claim_its_pool_runs(
        coordinated: Callable[..., tuple[Deployment, FaultProxy, dict[str, Any]]],
        store: str, tmp_path: Path) -> None:
    """A's own process stopped for two leases while its pool runs the group's first job:
    the job runs on to its end, and B runs the second after it. 7 to 15 s of two worker
    start-ups, the stop and the runs: ``long`` (the README suite keeps the renewal's unit
    test, ``tests/stores/test_coordination_leases.py``)."""
    _main_process_stopped(coordinated, store, tmp_path)


@pytest.mark.long
@pytest.mark.parametrize("store", ["redis", "postgres"])
def test_a_coordinated_prefork_worker_thawed_past_its_claim_stops_its_run_before_it_goes_on(
        coordinated: Callable[..., tuple[Deployment, FaultProxy, dict[str, Any]]],
        store: str, tmp_path: Path) -> None:
    """A frozen as a whole (``SIGSTOP`` of its process group) past the lease while its pool
    runs a job of a ``concurrency=1`` group; B takes the lapsed slot over and runs the
    group's next job; A thaws while it runs. A's pool process asks the coordination store
    as it thaws, before its task's code runs again, and holds the task until A's keeper
    stops it: the group never runs two jobs at once (the stale job runs again later, after
    B's: a worker froze mid-job)."""
    _whole_worker_frozen(coordinated, store, tmp_path)
