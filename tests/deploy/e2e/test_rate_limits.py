"""Cluster rate limits, end to end (docs/rate-limits.md; issue #16 acceptance 2, short variant).

Two real prefork workers of two processes each (:mod:`tests.deploy.e2e.periodic_proj`,
``rate_limit="5/s"`` cluster-scoped) on every store: no sliding 1 s window holds more than 5
starts of the limited task across both workers (its starts, as the task bodies record them);
per key, each key's starts stay within the limit while the keys together go faster; unlimited
tasks in the same queue are not held back; Celery's own per-worker bucket is not applied on top
(and a task without the cluster scope keeps Celery's per-worker bucket); keys with odd values
(NUL, a lone surrogate, separators, quotes, emoji, "") each keep their own window; countdown
jobs, retries, chains, groups and chords keep the limit;
a job prefetched behind a long task keeps its place in the window (its claim's count is renewed
with its lease), so a second worker cannot start more meanwhile.
The long variant (3 minutes, 60/m, four workers) is ``tests/deploy/faults/long_rate_limits.py``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from itertools import pairwise
from typing import Any

from celery import chain, chord, group

from tests.deploy.e2e.conftest import Worker
from tests.deploy.e2e.periodic_checks import most_in_window
from tests.deploy.e2e.periodic_proj import (
    both,
    free,
    limited,
    per_key,
    per_minute,
    per_worker,
    retried,
)
from tests.deploy.e2e.proj import events, make_app
from tests.support import wait_until

LIMIT = 5  # PLUS_TEST_RATE's default, "5/s"


def starts(prefix: str, kind: str) -> list[dict[str, Any]]:
    return events(prefix, kind)


def two_workers(start_worker: Callable[..., Worker]) -> None:
    for _ in range(2):
        start_worker(pool="prefork", concurrency=2, app="tests.deploy.e2e.periodic_proj")


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
    """The review's repro of b370b54: "3/m", a 1.5 s visibility timeout, a 4 s task ahead of
    three prefetched limited jobs on a solo worker, then a second worker. Without the renewal
    the three claims stopped counting at their first lease deadline, the second worker started
    three more, and one 60 s window held 6 starts."""
    env = {"PLUS_TEST_VT": "1.5", "PLUS_TEST_PREFETCH": "4"}
    app = make_app(prefix)
    with app.publish_batch():
        app.send_task(free.name, (0, 4.0))
        for n in range(6):
            app.send_task(per_minute.name, (n,))
    start_worker(app="tests.deploy.e2e.periodic_proj", env=env)  # solo: claims the task and three
    wait_until(lambda: starts(prefix, "free"), timeout=30, message="the long task started")
    start_worker(app="tests.deploy.e2e.periodic_proj", env=env)
    long_start = starts(prefix, "free")[0]["t"]
    wait_until(lambda: len(starts(prefix, "per_minute")) >= 3, timeout=30,
               message="three limited jobs started")
    # Past the long task (4 s), the lease deadlines (1.5 s) and the second worker's claims.
    wait_until(lambda: time.time() > long_start + 6.0, timeout=30, message="6 s")
    runs = sorted(starts(prefix, "per_minute"), key=lambda e: e["t"])
    assert [e["n"] for e in runs] == [0, 1, 2], [(e["t"] - long_start, e["n"]) for e in runs]
    assert runs[0]["t"] >= long_start + 3.9  # the prefetched ones, after the long task
    app.close()


ODD_KEYS = ("\x00", "\ud800", 'a:b|c"\\', "é", "\U0001f600", "")


def test_keys_with_odd_values_each_keep_their_own_window(
        start_worker: Callable[..., Worker], prefix: str) -> None:
    two_workers(start_worker)
    app = make_app(prefix)
    with app.publish_batch():
        for n in range(7):
            for key in ODD_KEYS:
                app.send_task(per_key.name, (key, n, 0.0))
    wait_until(lambda: len(starts(prefix, "per_key")) >= 7 * len(ODD_KEYS), timeout=60,
               message="every keyed task ran")
    runs = starts(prefix, "per_key")
    for key in ODD_KEYS:
        at = [e["t"] for e in runs if e["key"] == key]
        assert len(at) == 7 and most_in_window(at, 1.0) <= LIMIT, (key, sorted(at))
    # Six windows, not one: more than one key's limit starts in the first second.
    assert most_in_window([e["t"] for e in runs], 1.0) > 2 * LIMIT


def test_countdown_retries_and_canvas_members_keep_the_limit(
        start_worker: Callable[..., Worker], prefix: str) -> None:
    two_workers(start_worker)
    app = make_app(prefix)

    def member(name: str, n: int) -> Any:
        return app.signature(name, args=(n,), immutable=True)

    chord([member(limited.name, n) for n in range(6)], member(free.name, 1)).apply_async()
    chain(*(member(limited.name, n) for n in (10, 11, 12)), member(free.name, 2)).apply_async()
    group(member(limited.name, n) for n in range(20, 24)).apply_async()
    for n in range(30, 34):
        app.send_task(limited.name, (n,), countdown=1)
    for n in range(40, 43):
        app.send_task(retried.name, (n,))
    wait_until(lambda: len(starts(prefix, "limited")) >= 17, timeout=60,
               message="every limited task ran")
    wait_until(lambda: len(starts(prefix, "retried")) >= 6, timeout=60,
               message="every retried task ran twice")
    wait_until(lambda: len(starts(prefix, "free")) >= 2, timeout=30,
               message="the chord's callback and the chain's last link")
    limited_at = sorted(e["t"] for e in starts(prefix, "limited"))
    assert len(limited_at) == 17 and most_in_window(limited_at, 1.0) <= LIMIT, limited_at
    assert limited_at[-1] - limited_at[0] > 2.0  # 17 starts at 5 a second
    retried_runs = starts(prefix, "retried")
    assert sorted((e["n"], e["attempt"]) for e in retried_runs) == [
        (n, a) for n in range(40, 43) for a in (0, 1)]
    assert most_in_window([e["t"] for e in retried_runs], 1.0) <= LIMIT
    app.close()


def test_celerys_own_rate_limit_stays_per_worker(
        start_worker: Callable[..., Worker], prefix: str) -> None:
    """``rate_limit="2/s"`` without the cluster scope: Celery's token bucket in each worker,
    so each worker spaces its starts by half a second, and two workers start twice as many."""
    for _ in range(2):
        start_worker(app="tests.deploy.e2e.periodic_proj")
    app = make_app(prefix)
    with app.publish_batch():
        for n in range(12):
            app.send_task(per_worker.name, (n,))
    wait_until(lambda: len(starts(prefix, "per_worker")) >= 12, timeout=60,
               message="every task ran")
    by_worker: dict[int, list[float]] = {}
    for e in starts(prefix, "per_worker"):
        by_worker.setdefault(e["pid"], []).append(e["t"])
    assert len(by_worker) == 2, by_worker
    for at in by_worker.values():
        at.sort()
        assert all(b - a >= 0.45 for a, b in pairwise(at)), at
    assert most_in_window([t for at in by_worker.values() for t in at], 1.0) > 2
    app.close()


def test_a_worker_killed_mid_window_leaves_the_window_within_the_limit(
        start_worker: Callable[..., Worker], prefix: str) -> None:
    """A solo worker holding four claims (one started, three prefetched) is SIGKILLed: its
    started job counted when it started, its prefetched ones count until their lease lapses
    (2 s), then all four are recovered and start again elsewhere, counting again."""
    env = {"PLUS_TEST_VT": "2"}
    app = make_app(prefix)
    with app.publish_batch():
        for n in range(8):
            app.send_task(limited.name, (n, 0.5))
    doomed = start_worker(app="tests.deploy.e2e.periodic_proj", env=env)
    wait_until(lambda: starts(prefix, "limited"), timeout=30, message="a first start")
    start_worker(app="tests.deploy.e2e.periodic_proj", env=env)
    doomed.kill()
    wait_until(lambda: {e["n"] for e in starts(prefix, "limited")} == set(range(8)),
               timeout=60, message="every job started, the dead worker's again elsewhere")
    at = sorted(e["t"] for e in starts(prefix, "limited"))
    assert most_in_window(at, 1.0) <= LIMIT and at[-1] - at[0] > 2.0, at
    app.close()


def test_a_rate_limit_and_concurrency_on_the_same_task_both_hold(
        start_worker: Callable[..., Worker], prefix: str) -> None:
    """``rate_limit="5/s"`` cluster-scoped and ``concurrency=2`` on one task, 0.15 s each, on
    four pool processes: never more than 2 running, never more than 5 starts a second (each
    limit alone would allow more)."""
    two_workers(start_worker)
    app = make_app(prefix)
    with app.publish_batch():
        for n in range(15):
            app.send_task(both.name, (n, 0.15))
    wait_until(lambda: sum(e["edge"] == "end" for e in starts(prefix, "both")) >= 15,
               timeout=60, message="every job ran")
    events_ = sorted(starts(prefix, "both"), key=lambda e: (e["t"], e["edge"] == "start"))
    running = most = 0
    for e in events_:
        running += 1 if e["edge"] == "start" else -1
        most = max(most, running)
    assert most == 2, events_  # the slots were used, and never exceeded
    at = [e["t"] for e in events_ if e["edge"] == "start"]
    assert most_in_window(at, 1.0) <= LIMIT and at[-1] - at[0] > 2.0, at
    app.close()
