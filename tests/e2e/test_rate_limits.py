"""Cluster rate limits, end to end (docs/rate-limits.md; issue #16 acceptance 2, short variant).

Two real prefork workers of two processes each (:mod:`tests.e2e.periodic_proj`,
``rate_limit="5/s"`` cluster-scoped) on every store: no sliding 1 s window holds more than 5
starts of the limited task across both workers (its starts, as the task bodies record them);
per key, each key's starts stay within the limit while the keys together go faster; unlimited
tasks in the same queue are not held back; Celery's own per-worker bucket is not applied on top;
a job prefetched behind a long task keeps its place in the window (its claim's count is renewed
with its lease), so a second worker cannot start more meanwhile.
The long variant (3 minutes, 60/m, four workers) is ``tests/faults/long_rate_limits.py``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from tests.e2e.conftest import Worker
from tests.e2e.periodic_checks import most_in_window
from tests.e2e.periodic_proj import free, limited, per_key, per_minute
from tests.e2e.proj import events, make_app
from tests.support import wait_until

LIMIT = 5  # PLUS_TEST_RATE's default, "5/s"


def starts(prefix: str, kind: str) -> list[dict[str, Any]]:
    return events(prefix, kind)


def two_workers(start_worker: Callable[..., Worker]) -> None:
    for _ in range(2):
        start_worker(pool="prefork", concurrency=2, app="tests.e2e.periodic_proj")


def test_no_window_holds_more_starts_than_the_limit_and_free_tasks_are_not_held_back(
        start_worker: Callable[..., Worker], prefix: str) -> None:
    two_workers(start_worker)
    app = make_app(prefix)
    with app.publish_batch():
        for n in range(20):
            app.send_task(limited.name, (n, 0.05))
            app.send_task(free.name, (n, 0.05))
            app.send_task(free.name, (n + 100, 0.05))
    wait_until(lambda: len(starts(prefix, "limited")) >= 20, timeout=60,
               message="every limited task ran")
    wait_until(lambda: len(starts(prefix, "free")) >= 40, timeout=30, message="the free ones")
    limited_at = sorted(e["t"] for e in starts(prefix, "limited"))
    free_at = sorted(e["t"] for e in starts(prefix, "free"))
    assert most_in_window(limited_at, 1.0) <= LIMIT, limited_at
    # 20 starts at 5 per second need more than 3 s; the free tasks do not wait for them.
    assert limited_at[-1] - limited_at[0] > 3.0
    assert free_at[-1] < limited_at[0] + 3.0, (free_at[-1] - limited_at[0])
    app.close()


def test_per_key_each_key_keeps_the_limit_and_keys_do_not_wait_for_each_other(
        start_worker: Callable[..., Worker], prefix: str) -> None:
    two_workers(start_worker)
    app = make_app(prefix)
    keys = ("a", "b", "c")
    with app.publish_batch():
        for n in range(10):
            for key in keys:
                app.send_task(per_key.name, (key, n, 0.02))
    wait_until(lambda: len(starts(prefix, "per_key")) >= 30, timeout=60,
               message="every keyed task ran")
    runs = starts(prefix, "per_key")
    for key in keys:
        at = [e["t"] for e in runs if e["key"] == key]
        assert len(at) == 10 and most_in_window(at, 1.0) <= LIMIT, (key, sorted(at))
    # Together faster than one key's limit: 15 starts (3 keys x 5) in the first second.
    assert most_in_window([e["t"] for e in runs], 1.0) > LIMIT
    app.close()


def test_a_job_prefetched_behind_a_long_task_keeps_its_place_in_the_window(
        start_worker: Callable[..., Worker], prefix: str) -> None:
    """The review's repro of b370b54: "3/m", a 2 s visibility timeout, a 6 s task ahead of
    three prefetched limited jobs on a solo worker, then a second worker. Without the renewal
    the three claims stopped counting at their first lease deadline, the second worker started
    three more, and one 60 s window held 6 starts."""
    env = {"PLUS_TEST_VT": "2", "PLUS_TEST_PREFETCH": "4"}
    app = make_app(prefix)
    with app.publish_batch():
        app.send_task(free.name, (0, 6.0))
        for n in range(6):
            app.send_task(per_minute.name, (n,))
    start_worker(app="tests.e2e.periodic_proj", env=env)  # solo: claims the task and three
    wait_until(lambda: starts(prefix, "free"), timeout=30, message="the long task started")
    start_worker(app="tests.e2e.periodic_proj", env=env)
    long_start = starts(prefix, "free")[0]["t"]
    wait_until(lambda: len(starts(prefix, "per_minute")) >= 3, timeout=30,
               message="three limited jobs started")
    # Past the long task (6 s), the lease deadlines (2 s) and the second worker's claims.
    wait_until(lambda: time.time() > long_start + 9.0, timeout=30, message="9 s")
    runs = sorted(starts(prefix, "per_minute"), key=lambda e: e["t"])
    assert [e["n"] for e in runs] == [0, 1, 2], [(e["t"] - long_start, e["n"]) for e in runs]
    assert runs[0]["t"] >= long_start + 5.5  # the prefetched ones, after the long task
    app.close()
