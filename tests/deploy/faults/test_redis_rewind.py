"""A Redis rewind mid-run (issue #27, point 3): real ``celery-plus worker`` processes run jobs
they claimed after the server's last snapshot; the server is killed and started again from
that older snapshot, which has the jobs waiting and none of their claims or tokens.

Before the fix a job got token 1 twice, the stale run's requeue ended the live claim, and a
``concurrency=1`` group ran over its limit. Now (``check_boot`` in ``stores/redis/lua/lib.lua``)
the first claim after the restart finds the new server, raises the token counter to the clock
and claims nothing for one lease, while the runs whose claims were lost are stopped (their
heartbeat says ``lost``) or end with a settle the store refuses. So: every token issued after
the restart is above every token issued before it, every job ends under a token of the new
server, no two runs of one job overlap and the group never runs over its limit. The jobs
claimed after the snapshot run again (at least once: the store lost their claims or acks).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from collections.abc import Callable
from typing import Any

import pytest

from .app import LIMIT
from .harness import Deployment
from .servers import RedisServer


def tokens_of(deployment: Deployment) -> dict[str, list[int]]:
    """Job id -> every token its record names: the current claim's and the history's."""
    found = {}
    for job_id in deployment.jobs.values():
        record = deployment.inspect.job(job_id) or {}
        history = json.loads(record.get("hist") or "[]")
        found[job_id] = [int(record.get("tok") or 0), *(int(e["token"]) for e in history)]
    return found


def rewind_mid_run(deployment: Deployment, workers: int, plain: int, limited: int,
                   seconds: float) -> None:
    server: RedisServer = deployment.server  # type: ignore[attr-defined]
    for n in range(plain):
        deployment.publish("fault.work", f"w{n}", seconds)
    for n in range(limited):
        deployment.publish_limited("a", f"l{n}", seconds)
    with contextlib.closing(server.client()) as client:
        client.save()
    older = deployment.folder / "older.rdb"
    shutil.copy(server.folder / "dump.rdb", older)

    for worker in [deployment.start_worker(concurrency=2, wait=False) for _ in range(workers)]:
        deployment.wait_ready(worker)
    with deployment.deaths_watched():
        deployment.wait_running(min(2 * workers, plain + 1), timeout=60)
        with contextlib.closing(server.client()) as client:
            # No script writes meanwhile: the counter read is above every token issued.
            client.execute_command("CLIENT", "PAUSE", 5000, "WRITE")
            issued = int(client.get(f"{deployment.prefix}:tok") or 0)
            cut = {r.job for r in deployment.runs() if r.ended is None}
        crashed = time.time()
        server.crash()
        shutil.copy(older, server.folder / "dump.rdb")
        server.start()
        restarted = time.time()
        report = deployment.finish(f"rewind to a snapshot before the claims, lease "
                                   f"{deployment.vt:.0f}s", timeout=120)
    assert issued > 0 and cut, "no claim was going on at the rewind"
    # Tokens never repeat: the records hold only tokens of the restarted server.
    tokens = tokens_of(deployment)
    assert all(t > issued for ts in tokens.values() for t in ts), (issued, tokens)
    assert not report.lost, report.lost
    # No stale settle ended a live claim and no two runs went on at once.
    assert deployment.overlapping_runs() == []
    assert max(report.max_concurrent.values(), default=0) <= LIMIT, report.notes
    assert report.over_limit_s == {"a": 0.0} if limited else True, report.over_limit_s
    assert not report.leaked_holds and not report.leaked_slots and not report.left_running
    # Nothing was claimed for one lease after the restart. The jobs that ran again are jobs
    # claimed after the snapshot: the rewind lost their claims (cut short) or their acks.
    runs = deployment.runs()
    after = [r.started for r in runs if r.started > restarted]
    assert min(after) >= restarted + deployment.vt * 0.9, (min(after) - restarted)
    assert set(report.run_twice) <= {r.label for r in runs if r.started < crashed}
    assert {r.job for r in runs if r.stopped or r.ended is None} <= cut  # the lost claims'


def test_a_redis_rewind_mid_run_repeats_no_token_and_overlaps_no_run(
        deploy: Callable[..., Deployment]) -> None:
    rewind_mid_run(deploy("rewind", "redis-rdb", vt=2.0), workers=1, plain=1, limited=2,
                   seconds=0.8)


@pytest.mark.long
def test_a_redis_rewind_mid_run_long(deploy: Callable[..., Deployment]) -> None:
    rewind_mid_run(deploy("rewind-long", "redis-rdb", vt=6.0), workers=2, plain=12,
                   limited=6, seconds=2.0)


@pytest.mark.long
def test_a_holder_that_cannot_hear_the_restart_is_stopped_before_its_job_runs_again(
        deploy: Callable[..., Deployment]) -> None:
    """Worker A reaches Redis through a proxy that stalls just before the rewind, so no
    heartbeat tells it its claims are lost: its runs go on until its lease watch stops them
    (80% of a lease after its last renewal). Worker B reconnects at once and would claim
    A's jobs again meanwhile; the grace of one lease keeps it from doing so."""
    deployment = deploy("rewind, a stalled holder", "redis-rdb", vt=8.0, proxied=True,
                        conf={"worker_prefetch_multiplier": 1})
    server: RedisServer = deployment.server  # type: ignore[attr-defined]
    proxy: Any = deployment.proxy  # type: ignore[attr-defined]
    for n in range(2):
        deployment.publish("fault.work", f"w{n}", 12.0)
        deployment.publish_limited("a", f"l{n}", 12.0)
    with contextlib.closing(server.client()) as client:
        client.save()
    older = deployment.folder / "older.rdb"
    shutil.copy(server.folder / "dump.rdb", older)
    # A first: it holds the jobs first in line (w0, l0), those B claims first after the
    # restart; B holds w1 (l1 waits for the group).
    a = deployment.start_worker(concurrency=2)
    deployment.wait_running(2, timeout=60)
    deployment.start_worker(concurrency=2, broker="plus+" + server.url)  # B, direct
    with deployment.deaths_watched():
        deployment.wait_running(3, timeout=60)
        a_pids = {a.proc.pid, *a.children()}
        proxy.stall()
        crashed = time.time()
        server.crash()
        shutil.copy(older, server.folder / "dump.rdb")
        server.start()
        report = deployment.finish("rewind under a stalled holder, lease 8s", timeout=120)
    runs = deployment.runs()
    assert any(r.pid in a_pids and r.started < crashed for r in runs), "A held nothing"
    assert deployment.overlapping_runs() == [], deployment.logs()
    assert max(report.max_concurrent.values(), default=0) <= LIMIT, report.notes
    assert not report.lost and not report.leaked_holds and not report.leaked_slots
