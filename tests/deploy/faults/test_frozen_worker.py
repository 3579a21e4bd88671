"""``SIGSTOP`` of a worker past its lease, then ``SIGCONT``.

While worker A is frozen, worker B recovers A's jobs and runs them. When A thaws: the
deliveries it only had queued do not start (defect 12); the tasks it was running are
stopped at once in the prefork pool (their jobs run on B under live claims, and two runs
at once would break the concurrency limit); anything late from A — an ack, a retry, a
result — is fenced by the lease token, so no slot or hold is left behind. Jobs A was
running when it froze ran twice (the at-least-once case: a worker froze mid-job); no other.

The threads variant's stale runs cannot be stopped one by one (tasks of in-process pools):
since issue #27 the worker exits as it thaws (its lease watch, code 75, or its guard process),
its runs past their leases with it. Before, they ended on A right after B's runs of the same
jobs started, and asked for a retry (a continuation published with the job's id), which had to
be fenced (``tests/deploy/e2e/test_fences.py`` still proves that fence); either way B's live
claims are never ended by A, and each group (limit 1) never runs two jobs at once.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.inspectors import inspector_for
from tests.support import wait_until

from .harness import FROZE, MAINTENANCE_S, RETRIED, Deployment, Worker, check

#: How long a thawed prefork worker's stale run may go on before it is stopped: not at all
#: (its pool process stops it as it thaws, before its code runs again: ``thaw_guard.py``).
STOP_WITHIN_S = 0.0
#: How long into B's runs of A's jobs A thaws.
THAWED_INSIDE_S = 0.3
#: How long the threads variant's stale runs go on after the thaw (they end themselves
#: once they see B's run: a poll of the ledger, under load).
THREADS_STALE_S = 1.0

STORES = ["redis", "postgres", "sqlite"]


def run_frozen(deployment: Deployment, pool: str, limited: bool) -> None:
    """``limited``: with jobs of concurrency groups (prefork: A's stale runs are stopped).
    Without (threads): retrying jobs, whose stale runs A's exit ends."""
    with deployment.deaths_watched():
        _run_frozen(deployment, pool, limited)


def _run_frozen(deployment: Deployment, pool: str, limited: bool) -> None:
    vt = deployment.vt
    a = deployment.start_worker(pool=pool, concurrency=2)
    # What A runs when it freezes: its first two claims (limited jobs, or retrying ones).
    first = "l" if limited else "r"
    for n in range(2):
        if limited:
            deployment.publish_limited("ab"[n], f"l{n}", 2.0)
        else:  # long enough that B's run still goes on when A's stale run retries
            deployment.publish_limited("ab"[n], f"r{n}", 4.0, True,
                                       task="fault.limited_retry_once", runs=2)
    for n in range(2):
        deployment.publish("fault.unique", f"u{n}", 2.0)
        if limited:
            deployment.publish("fault.retry_once", f"r{n}", 2.0, runs=2)
    for n in range(4):
        deployment.publish("fault.work", f"w{n}", 0.5)
    deployment.wait_running(2, prefix=first)
    deployment.note_in_flight({a.proc.pid, *a.children()})
    frozen_at = time.time()
    ready_at: list[float] = []
    with deployment.frozen(a):
        b = deployment.start_worker(pool="prefork", concurrency=2, wait=False)

        def b_ready() -> bool:
            if not ready_at and " ready." in b.log():
                ready_at.append(time.time())
            return bool(ready_at)

        # Recovery needs a live worker: B, ready this long after A froze (seconds on a
        # loaded machine). On SQLite, A frozen inside a write transaction keeps the file's one
        # write lock until it thaws, so B may get ready only then: not awaited past 20 s here.
        with contextlib.suppress(AssertionError):
            wait_until(b_ready, timeout=20, message="B ready")
        # The lease expires and B recovers the jobs: A thaws while B runs them (a stale run
        # going on after the thaw overlaps a live one), or after this long at the latest
        # (on SQLite, B may be waiting for the write lock A holds).
        with contextlib.suppress(AssertionError):
            wait_until(lambda: _taken_over(deployment, first, a), interval=0.05,
                       timeout=vt + 2 * MAINTENANCE_S + 1.0, message="B runs A's jobs")
            time.sleep(THAWED_INSIDE_S)
    frozen_s = time.time() - frozen_at
    wait_until(lambda: b_ready() or b.proc.poll() is not None, timeout=60,
               message="worker B ready")
    assert b.proc.poll() is None and ready_at, b.log()
    assert "consuming on Celery's event loop" in b.log(), b.log()
    b_ready_s = ready_at[0] - frozen_at
    deployment.fault_ended = time.time()
    deployment.wait_all_finished(timeout=120)
    time.sleep(1.0)  # whatever A still does late happens now
    report = deployment.finish(f"{pool} pool frozen {frozen_s:.1f}s, "
                               f"lease {vt:.0f}s, B ready {b_ready_s:.1f}s after the freeze")
    if not limited:  # each job was continued once: by B's retry, never by A's stale one
        retried = {label: _outcomes(deployment, label).count("retried")
                   for label in ("r0", "r1")}
        assert retried == {"r0": 1, "r1": 1}, (retried, report.notes)
    check(report, recovery_within=max(vt, b_ready_s) + MAINTENANCE_S + 1.0,
          allow_twice=(FROZE, RETRIED),
          overlap_s=STOP_WITHIN_S if limited else THREADS_STALE_S)


def _taken_over(deployment: Deployment, prefix: str, a: Worker) -> bool:
    """Whether another worker runs each job A was running when it froze."""
    mine = {a.proc.pid, *a.children()}
    try:
        runs = [r for r in deployment.runs() if r.label.startswith(prefix)]
    except sqlite3.OperationalError:  # "locking protocol": A froze inside a ledger access
        return False
    stale = {r.job for r in runs if r.pid in mine and r.ended is None}
    return bool(stale) and all(any(r.job == job and r.pid not in mine and r.ended is None
                                   for r in runs) for job in stale)


def _outcomes(deployment: Deployment, label: str) -> list[str]:
    """The outcomes in the store's attempt history of job ``label``."""
    raw = (inspector_for(deployment.view).job(deployment.jobs[label]) or {}).get("hist") or "[]"
    return [str(entry.get("outcome")) for entry in json.loads(raw) if isinstance(entry, dict)]


@pytest.mark.parametrize("store", STORES)
def test_sigstop_past_the_lease_prefork(deploy: Callable[..., Deployment], store: str) -> None:
    run_frozen(deploy("sigstop prefork", store, vt=3.0), "prefork", limited=True)


@pytest.mark.parametrize("store", STORES)
def test_sigstop_past_the_lease_threads_late_acks_and_retries_are_fenced(
        deploy: Callable[..., Deployment], store: str) -> None:
    run_frozen(deploy("sigstop threads", store, vt=3.0), "threads", limited=False)


@pytest.mark.long
@pytest.mark.parametrize("store", STORES)
def test_sigstop_past_the_lease_prefork_long(deploy: Callable[..., Deployment],
                                             store: str) -> None:
    run_frozen(deploy("sigstop prefork-long", store, vt=30.0), "prefork", limited=True)



@pytest.mark.parametrize("store", STORES)
def test_a_worker_whose_own_process_stops_keeps_the_jobs_its_pool_runs(
        deploy: Callable[..., Deployment], store: str, tmp_path: Path) -> None:
    """Only A's own process stops (a debugger, ``SIGSTOP`` of its pid) for longer than the
    lease while its pool processes run two jobs on: they renew their leases themselves, so B
    never takes those jobs over — each runs once, and never beside another run of its group
    (without the pool's own renewal B ran both while A's pool still did). The jobs run until
    A's process goes on (a marker file): with a fixed length they could end inside the stop
    when B's start took long (load 25: they ended 2.6 s into it, and ran again once their
    claims lapsed, one after the other — the documented case of a run that ended meanwhile)."""
    deployment = deploy("main process stopped", store, vt=3.0)
    vt = deployment.vt
    marker = tmp_path / "go-on"
    a = deployment.start_worker(pool="prefork", concurrency=2)
    for n in range(2):
        job_id = str(deployment.app.send_task("fault.limited_until",
                                              ("ab"[n], f"l{n}", str(marker), 120.0)).id)
        deployment.note_published(f"l{n}", job_id)
    deployment.wait_running(2, prefix="l")
    deployment.start_worker(pool="prefork", concurrency=2)
    frozen_at = time.time()
    with deployment.frozen(a, main_only=True):
        time.sleep(vt + 2 * MAINTENANCE_S + 1.0)  # the fault: longer than the lease
    frozen_s = time.time() - frozen_at
    deployment.fault_ended = time.time()
    time.sleep(1.0)  # the runs go on a moment past the stop, under A's keeper again
    marker.touch()
    deployment.wait_all_finished(timeout=120)
    report = deployment.finish(f"worker's own process stopped {frozen_s:.1f}s, lease "
                               f"{vt:.0f}s, its prefork pool running")
    check(report, allow_twice=(), overlap_s=0.0)
