"""The marks every benchmark worker writes to Redis, whichever library runs the task."""

from __future__ import annotations

import subprocess
import time

import redis


def count_done(marks: redis.Redis, run: str, n: int, sleep_s: float) -> None:
    """One job of ``n``: sleep (the I/O-bound rows), count it, mark the first and the last."""
    if sleep_s:
        time.sleep(sleep_s)
    done = marks.incr(f"{run}:bench-done")
    if done == 1 or done == n:
        marks.set(f"{run}:mark:{'first' if done == 1 else 'last'}", repr(time.time()))


def await_mark(marks: redis.Redis, key: str, worker: subprocess.Popen[bytes], timeout: float,
               what: str, poll_s: float = 0.02) -> None:
    """Wait until ``key`` is written; raise if ``worker`` exits or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while marks.get(key) is None:
        if worker.poll() is not None:
            raise RuntimeError(f"{what}: the worker exited with {worker.returncode}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not drained in {timeout} s")
        time.sleep(poll_s)
