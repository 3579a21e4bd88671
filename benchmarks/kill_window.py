"""The kill -9 window on prefork: which returned tasks run again after a SIGKILL.

A ``prefork -c 2`` worker runs a stream of ``returned`` jobs (5 ms each; each records the time
it first returned and counts its runs). Once a third of them have returned, the worker's whole
process group is SIGKILLed; a second worker then recovers the dead worker's leases (after the
visibility timeout, 3 s here) and finishes the queue. A job that had returned before the kill
and runs again is one whose ack had not reached the store: its age at the kill (kill time
minus its first return) is the window. Target (issue #13): no re-run of a job that had
returned more than 10 ms before the kill.

    python -m benchmarks.kill_window [--jobs 600] [--stores plus,plus-pg,plus-sqlite]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import redis

from .throughput import CONFIGS, REDIS_URL, ROOT, _cleanup, _env

TASK_S = 0.005
VISIBILITY_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class Window:
    returned_before_kill: int
    reruns: int
    reruns_older_than_10ms: int
    oldest_rerun_ms: float | None


def _worker(kind: str, run: str, name: str) -> subprocess.Popen[bytes]:
    env = {**_env(kind, run), "BENCH_VISIBILITY_TIMEOUT": str(VISIBILITY_TIMEOUT_S)}
    cmd = [*CONFIGS[kind][1], "-A", "benchmarks.bench_app", "worker", "--pool=prefork",
           "--concurrency=2", "--loglevel=WARNING", "--without-gossip", "--without-mingle",
           "--without-heartbeat", f"--hostname={name}-{run}@%h"]
    return subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def _until(check: Callable[[], bool], what: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.002)


def measure(kind: str, jobs: int) -> Window:
    run = f"bench-{kind}-{uuid.uuid4().hex[:8]}"
    marks = redis.Redis.from_url(REDIS_URL)
    code = ("from benchmarks.bench_app import app, returned\n"
            f"with app.publish_batch():\n    for i in range({jobs}):\n"
            f"        returned.delay(i, {TASK_S})\n")
    try:
        subprocess.run([sys.executable, "-c", code], env=_env(kind, run), cwd=ROOT,
                       check=True)
        first = _worker(kind, run, "doomed")
        _until(lambda: marks.hlen(f"{run}:first") >= jobs // 3, "a third of the jobs")
        killed_at = time.time()
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        before = {i: float(t) for i, t in marks.hgetall(f"{run}:first").items()
                  if float(t) <= killed_at}
        second = _worker(kind, run, "rescuer")
        try:
            _until(lambda: marks.hlen(f"{run}:first") >= jobs, "the rest of the jobs")
        finally:
            os.killpg(second.pid, signal.SIGTERM)
            second.wait(timeout=30)
        runs = {i: int(n) for i, n in marks.hgetall(f"{run}:runs").items()}
        ages = [(killed_at - before[i]) * 1000 for i in before if runs.get(i, 0) > 1]
        return Window(len(before), len(ages), sum(age > 10 for age in ages),
                      max(ages) if ages else None)
    finally:
        marks.close()
        _cleanup(run)


def report(jobs: int, kinds: list[str]) -> dict[str, Window]:
    found: dict[str, Window] = {}
    print(f"\nkill -9 window: prefork -c 2, {jobs} jobs of {TASK_S * 1000:.0f} ms, the worker's "
          "process group SIGKILLed after a third returned")
    print(f"{'configuration':36} {'returned':>9} {'re-run':>7} {'>10 ms':>7} {'oldest ms':>10}")
    for kind in kinds:
        window = found[kind] = measure(kind, jobs)
        oldest = "-" if window.oldest_rerun_ms is None else f"{window.oldest_rerun_ms:.1f}"
        print(f"{CONFIGS[kind][0]:36} {window.returned_before_kill:9} {window.reruns:7} "
              f"{window.reruns_older_than_10ms:7} {oldest:>10}")
    return found


def main(argv: list[str] | None = None) -> dict[str, Window]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=600)
    parser.add_argument("--stores", default="plus,plus-pg,plus-sqlite")
    args = parser.parse_args(argv)
    return report(args.jobs, args.stores.split(","))


if __name__ == "__main__":
    main()
