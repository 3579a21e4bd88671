"""``delay()`` enqueue rate with one or several concurrent publisher processes.

Each publisher is its own process: it connects, sends one warm-up ``noop.delay()``, waits for
a common start signal, then calls ``noop.delay()`` for its share of the jobs. The rate is all
jobs over the time from the first publisher's start to the last one's end; no worker runs.

A last row runs one process of 8 threads (``--threads``): threads of one process publishing
to ``plus+postgresql://`` share transactions (group commit, ``stores/postgres/pool.py``).

    python -m benchmarks.publishers [--jobs 4000] [--publishers 1,8] [--threads 8]
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
import json, resource, sys, threading, time
import redis
from benchmarks.bench_app import REDIS_URL, RUN, noop

share, go, threads = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
def publish(count):
    for i in range(count):
        noop.delay(i, -1)
workers = [threading.Thread(target=publish, args=(share // threads,)) for _ in range(threads)]
for _ in range(threads):  # connect and warm up (one connection per thread)
    warm = threading.Thread(target=noop.delay, args=(-1, share))
    warm.start()
    warm.join()
marks = redis.Redis.from_url(REDIS_URL)
marks.incr(f"{RUN}:ready")
while marks.get(go) is None:
    time.sleep(0.001)
def cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
start, cpu_start = time.time(), cpu()
for worker in workers:
    worker.start()
for worker in workers:
    worker.join()
print(json.dumps([start, time.time(), cpu() - cpu_start]))
"""


def enqueue_rate(kind: str, jobs: int, publishers: int, threads: int = 1,
                 timeout: float = 300) -> tuple[float, float]:
    """Jobs per second that ``publishers`` processes of ``threads`` threads each reach
    together with ``delay()``, and the publishers' CPU microseconds per call (which barely
    moves with the machine's load)."""
    run = f"bench-{kind}-{uuid.uuid4().hex[:8]}"
    marks = redis.Redis.from_url(REDIS_URL)
    go = f"{run}:go"
    share = jobs // publishers // threads * threads
    procs = [subprocess.Popen([sys.executable, "-c", _PUBLISHER, str(share), go, str(threads)],
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
    calls = share * publishers
    rate = calls / (max(span[1] for span in spans) - min(span[0] for span in spans))
    return rate, 1e6 * sum(span[2] for span in spans) / calls


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=4000)
    parser.add_argument("--publishers", default="1,8")
    parser.add_argument("--threads", type=int, default=8,
                        help="threads of the one-process row (0: no such row)")
    args = parser.parse_args(argv)
    return report(args.jobs, [int(n) for n in args.publishers.split(",")], args.threads)


def report(jobs: int, counts: list[int], threads: int = 8) -> dict[str, float]:
    """Print and return the enqueue rates of every configuration for each publisher count,
    then for one process of ``threads`` threads (0: not run)."""
    rates: dict[str, float] = {}
    print(f"delay() enqueue: {jobs} jobs shared by N publisher processes (N = {threads}t: "
          f"one process, {threads} threads), no worker running")
    print(f"{'configuration':48} {'N':>3} {'enqueue/s':>10} {'vs plain Celery':>16} "
          f"{'CPU us/call':>12}")
    runs = [(count, 1, str(count)) for count in counts]
    if threads:
        runs.append((1, threads, f"{threads}t"))
    for count, per_process, label in runs:
        base = 0.0
        for kind in ("celery", "plus", "plus-pg", "plus-pg-async"):
            rate, cpu = enqueue_rate(kind, jobs, count, per_process)
            base = base or rate
            rates[f"{kind}/{label}"] = rate
            print(f"{CONFIGS[kind][0]:48} {label:>3} {rate:10.0f} {rate / base:15.2f}x "
                  f"{cpu:12.0f}")
    return rates


if __name__ == "__main__":
    main()
