"""``delay()`` enqueue rate with one or several concurrent publisher processes.

Each publisher is its own process: it connects, sends one warm-up ``noop.delay()``, waits for
a common start signal, then calls ``noop.delay()`` for its share of the jobs. The rate is all
jobs over the time from the first publisher's start to the last one's end; no worker runs.

    python -m benchmarks.publishers [--jobs 4000] [--publishers 1,8]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import uuid

import redis

from .throughput import CONFIGS, REDIS_URL, ROOT, _cleanup, _env

_PUBLISHER = """
import json, sys, time
import redis
from benchmarks.bench_app import REDIS_URL, RUN, noop

share, go = int(sys.argv[1]), sys.argv[2]
noop.delay(-1, share)  # connect and warm up before the start signal
marks = redis.Redis.from_url(REDIS_URL)
marks.incr(f"{RUN}:ready")
while marks.get(go) is None:
    time.sleep(0.001)
start = time.time()
for i in range(share):
    noop.delay(i, -1)
print(json.dumps([start, time.time()]))
"""


def enqueue_rate(kind: str, jobs: int, publishers: int, timeout: float = 300) -> float:
    """Jobs per second that ``publishers`` processes reach together with ``delay()``."""
    run = f"bench-{kind}-{uuid.uuid4().hex[:8]}"
    marks = redis.Redis.from_url(REDIS_URL)
    go = f"{run}:go"
    share = jobs // publishers
    procs = [subprocess.Popen([sys.executable, "-c", _PUBLISHER, str(share), go],
                              env=_env(kind, run), cwd=ROOT, stdout=subprocess.PIPE, text=True)
             for _ in range(publishers)]
    try:
        deadline = time.monotonic() + timeout
        while int(marks.get(f"{run}:ready") or 0) < publishers:
            if any(p.poll() not in (None, 0) for p in procs) or time.monotonic() > deadline:
                raise RuntimeError(f"{kind}: publishers did not get ready")
            time.sleep(0.01)
        marks.set(go, "1")
        spans = [json.loads(p.communicate(timeout=timeout)[0].strip().splitlines()[-1])
                 for p in procs]
        if any(p.returncode for p in procs):
            raise RuntimeError(f"{kind}: a publisher failed")
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        marks.close()
        _cleanup(run)
    return share * publishers / (max(end for _, end in spans) - min(s for s, _ in spans))


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=4000)
    parser.add_argument("--publishers", default="1,8")
    args = parser.parse_args(argv)
    return report(args.jobs, [int(n) for n in args.publishers.split(",")])


def report(jobs: int, counts: list[int]) -> dict[str, float]:
    """Print and return the enqueue rates of every configuration for each publisher count."""
    rates: dict[str, float] = {}
    print(f"delay() enqueue: {jobs} jobs shared by N publisher processes, no worker running")
    print(f"{'configuration':48} {'N':>3} {'enqueue/s':>10} {'vs plain Celery':>16}")
    for count in counts:
        base = rates[f"celery/{count}"] = enqueue_rate("celery", jobs, count)
        for kind in ("celery", "plus", "plus-pg", "plus-pg-async"):
            rate = base if kind == "celery" else enqueue_rate(kind, jobs, count)
            rates[f"{kind}/{count}"] = rate
            print(f"{CONFIGS[kind][0]:48} {count:3} {rate:10.0f} {rate / base:15.2f}x")
    return rates


if __name__ == "__main__":
    main()
