"""The marks every benchmark worker writes to Redis, whichever library runs the task."""

from __future__ import annotations

import time

import redis


def count_done(marks: redis.Redis, run: str, n: int, sleep_s: float) -> None:
    """One job of ``n``: sleep (the I/O-bound rows), count it, mark the first and the last."""
    if sleep_s:
        time.sleep(sleep_s)
    done = marks.incr(f"{run}:bench-done")
    if done == 1 or done == n:
        marks.set(f"{run}:mark:{'first' if done == 1 else 'last'}", repr(time.time()))
