"""Prefork pool processes that die by a signal do not wedge the worker.

A pool process that has published a task owns a broker connection; on ``plus+postgresql://``
that is a psycopg pool with helper threads. A SIGTERM (``revoke(terminate=True)``, an operator,
a supervisor) taken by such a thread used to be handled while the dying process held the pool's
result-pipe lock, and every other pool process then waited on that lock forever
(``celery_plus/runtime/helper_threads.py``). Runs on each durable store (``broker_kind``).
"""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from typing import Any

from .conftest import Worker, wait_until
from .proj import events

ROUNDS = 6


def test_pool_processes_killed_by_sigterm_leave_the_worker_serving(
        client: Any, start_worker: Callable[..., Worker], prefix: str) -> None:
    worker = start_worker(pool="prefork", concurrency=2)
    try:
        _kill_pool_processes_one_by_one(client, worker, prefix)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n--- worker log ---\n{worker.log()[-4000:]}") from None
    assert worker.proc.poll() is None, worker.log()


def _kill_pool_processes_one_by_one(client: Any, worker: Worker, prefix: str) -> None:
    for n in range(ROUNDS):
        client.send_task("proj.publish_then_sleep", (n, 60))
        wait_until(lambda n=n: [e for e in events(prefix, "sleeping") if e["n"] == n],
                   timeout=30, message=f"publish_then_sleep {n} sleeping")
        pid = next(e["pid"] for e in events(prefix, "sleeping") if e["n"] == n)
        assert pid != worker.proc.pid
        os.kill(pid, signal.SIGTERM)
        # The worker goes on serving: a fresh job completes on the remaining processes.
        client.send_task("proj.mark", (1000 + n,))
        wait_until(lambda n=n: [e for e in events(prefix, "mark") if e["n"] == 1000 + n],
                   timeout=30, message=f"mark {1000 + n} after SIGTERM {n + 1}")
