"""Issue 11, defect 12: a frozen worker does not start the jobs it no longer holds.

Worker A claims four jobs (its prefetch window: one runs, three wait in the worker) and is
frozen (``SIGSTOP`` of its process group) past its lease. Worker B recovers the four jobs
and runs them. When A goes on (``SIGCONT``), the job it was running finishes there (that one
ran twice: the worker froze mid-job, the at-least-once case), but the three that only
waited must not start on A: their leases are gone, B runs them (a threads or solo worker,
which cannot stop the run that went on past its lease, exits as it thaws: issue #27). Runs on
each durable store
(``broker_kind``) and pool: prefork (the waiting jobs sit in the pool's queue), threads (in
the executor's queue) and solo (claimed, not yet handed to Celery).
"""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from celery_plus.model.store import Backend
from tests.deploy.matrix import pools
from tests.inspectors import inspector_for

from .conftest import Worker, wait_until
from .proj import events

VT_S = 2.0
JOB_S = 1.0
JOBS = 4


@pools("prefork", "threads", "solo")
def test_a_frozen_worker_does_not_start_jobs_it_no_longer_holds(
    client: Any, start_worker: Callable[..., Worker], prefix: str, view: Backend, pool: str
) -> None:
    env = {"PLUS_TEST_VT": str(VT_S)}
    ids = [client.tasks["proj.sleep_mark"].delay(n, JOB_S).id for n in range(JOBS)]
    a = start_worker(pool=pool, concurrency=1, env=env)
    wait_until(lambda: events(prefix, "start"), timeout=30, message="A's first job started")
    wait_until(lambda: len(inspector_for(view).ids_in_state("running")) == JOBS, timeout=10,
               message="A holds all four jobs")
    holder_a = {(inspector_for(view).job(i) or {}).get("wk") for i in ids}
    assert len(holder_a) == 1, holder_a

    os.killpg(a.proc.pid, signal.SIGSTOP)
    try:
        b = start_worker(pool="prefork", concurrency=1, env=env)

        def taken_over() -> bool:
            return all((inspector_for(view).job(i) or {}).get("wk") not in holder_a | {None}
                       and (inspector_for(view).job(i) or {}).get("st") in ("running", "completed")
                       for i in ids)

        wait_until(taken_over, timeout=30, message="B claimed A's four jobs")
    finally:
        os.killpg(a.proc.pid, signal.SIGCONT)

    def all_completed() -> bool:
        return all((inspector_for(view).job(i) or {}).get("st") == "completed" for i in ids)

    wait_until(all_completed, timeout=60, message="every job completed")
    # A had time to start what it still had queued (it would, right after its stale job).
    time.sleep(JOB_S + 1.0)
    starts = events(prefix, "start")
    runs = Counter(e["n"] for e in starts)
    on_a = Counter(e["n"] for e in starts if e["pid"] not in _pids(b))
    assert runs[0] <= 2, (runs, a.log()[-3000:])
    assert {n: runs[n] for n in range(1, JOBS)} == dict.fromkeys(range(1, JOBS), 1), \
        (runs, on_a, events(prefix), a.log()[-3000:], b.log()[-3000:])
    assert not any(on_a[n] for n in range(1, JOBS)), (on_a, events(prefix), a.log()[-3000:])
    assert "consuming on Celery's event loop" in a.log()  # the loop under test
    if pool == "prefork":
        assert a.proc.poll() is None, a.log()
        assert "lease was lost" in a.log() or "lease of job" in a.log(), a.log()[-3000:]
    else:
        # Issue #27: a run that went on past its lease (the job A ran as it froze, if it was
        # still running), which a task of this pool cannot be stopped one by one from, ends
        # the worker (its lease watch, code 75, or its guard process, SIGKILL, whichever runs
        # first after the thaw); a worker whose run had ended goes on.
        code = a.proc.poll()
        assert code in (None, 75, -signal.SIGKILL), a.log()[-3000:]
        if code is not None:
            assert "this worker exits now (code 75)" in a.log() or "LeaseGuard" in a.log(), \
                a.log()[-3000:]
    for job_id in ids:  # A's late acks were fenced: B's claims ended the jobs
        record = inspector_for(view).job(job_id) or {}
        assert record.get("wk") not in holder_a, record


def _pids(worker: Worker) -> set[int]:
    """The worker's process and its pool processes (prefork)."""
    try:
        text = Path(f"/proc/{worker.proc.pid}/task/{worker.proc.pid}/children").read_text()
    except OSError:
        text = ""
    return {worker.proc.pid, *map(int, text.split())}
