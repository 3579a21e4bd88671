"""Every pool: drain rate and ack latency, plain Celery and celery-plus side by side, Dramatiq as
the outside reference, in one invocation.

* **Drain**: N ``counted`` jobs are enqueued, then one worker starts on the full queue; the rate is
  completions per second between the first and the last completion. solo and ``prefork -c 2`` run
  a no-op; ``threads -c 8`` and ``gevent -c 50`` an I/O-bound task (``time.sleep(0.01)``), and
  Dramatiq's worker (one process, 8 threads) runs the same tasks on the same Redis.
* **Ack latency**: one ``timed`` job at a time on a running worker; the task writes the time just
  before its body returns, and a probe polls the store until the ack is durable there (for
  celery-plus, the job's state is ``completed``; for plain Celery, its unacked hash is empty
  again). Reported as the median, the 95th percentile and the maximum; the maximum is the
  kill -9 window: a worker SIGKILLed later than that after a task returned re-runs nothing.

* **Enqueue** (``benchmarks/publishers.py``): ``delay()`` from 1 and from 8 publisher processes,
  plain Celery and celery-plus on Redis and on PostgreSQL.
* **Kill -9 window** (``benchmarks/kill_window.py``): which returned jobs a SIGKILLed prefork
  worker runs again, on every store.

    python -m benchmarks.pools [--jobs 3000] [--latency-jobs 40] [--publish-jobs 4000]
                               [--kill-jobs 600]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Any

import redis

from . import kill_window, publishers
from .cpu import WorkerCPU
from .throughput import CONFIGS, REDIS_URL, ROOT, _cleanup, _env

SLEEP_S = 0.01


@dataclass(frozen=True)
class Pool:
    name: str
    args: tuple[str, ...]
    sleep_s: float


POOLS = (
    Pool("solo", ("--pool=solo", "--concurrency=1"), 0.0),
    Pool("prefork -c 2", ("--pool=prefork", "--concurrency=2"), 0.0),
    Pool("threads -c 8", ("--pool=threads", "--concurrency=8"), SLEEP_S),
    Pool("gevent -c 50", ("--pool=gevent", "--concurrency=50"), SLEEP_S),
)
DRAMATIQ = [sys.executable, "-m", "dramatiq", "benchmarks.dramatiq_app", "--processes", "1",
            "--threads", "8"]


def _worker(kind: str, run: str, pool: Pool) -> subprocess.Popen[bytes]:
    if kind == "dramatiq":
        cmd = DRAMATIQ
    else:
        cmd = [*CONFIGS[kind][1], "-A", "benchmarks.bench_app", "worker", *pool.args,
               "--loglevel=WARNING", "--without-gossip", "--without-mingle",
               "--without-heartbeat", f"--hostname={run}@%h"]
    return subprocess.Popen(cmd, env=_env(kind, run), cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _enqueue(kind: str, run: str, jobs: int, sleep_s: float) -> None:
    if kind == "dramatiq":
        code = ("from benchmarks.dramatiq_app import counted\n"
                f"for i in range({jobs}):\n    counted.send(i, {jobs}, {sleep_s})\n")
    else:
        code = ("import contextlib\n"
                "from benchmarks.bench_app import app, counted\n"
                "batch = getattr(app, 'publish_batch', None)\n"
                f"for start in range(0, {jobs}, 500):\n"
                "    with batch() if batch else contextlib.nullcontext():\n"
                f"        for i in range(start, min(start + 500, {jobs})):\n"
                f"            counted.delay(i, {jobs}, {sleep_s})\n")
    subprocess.run([sys.executable, "-c", code], env=_env(kind, run), cwd=ROOT, check=True)


@dataclass(frozen=True)
class Drain:
    """A drain's rate, and the worker's CPU per job while it ran (main process, pool)."""

    rate: float
    parent_ms: float
    pool_ms: float


def drain(kind: str, pool: Pool, jobs: int, timeout: float = 600) -> Drain:
    run = f"bench-{kind}-{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(REDIS_URL)
    try:
        _enqueue(kind, run, jobs, pool.sleep_s)
        proc = _worker(kind, run, pool)
        cpu = WorkerCPU(proc.pid)
        try:
            deadline = time.monotonic() + timeout
            started = False
            while client.get(f"{run}:mark:last") is None:
                if proc.poll() is not None:
                    raise RuntimeError(f"{kind} {pool.name} worker exited: {proc.returncode}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{kind} {pool.name} did not drain in {timeout}s")
                if started:
                    cpu.sample()
                elif client.get(f"{run}:mark:first") is not None:
                    started = True
                    cpu.start()
                    done_at_start = int(client.get(f"{run}:bench-done") or 0)
                time.sleep(0.005 if not started else 0.05)
            cpu.sample()
        finally:
            _stop(proc)
        first = float(client.get(f"{run}:mark:first") or 0)
        last = float(client.get(f"{run}:mark:last") or 0)
        measured = max(jobs - (done_at_start if started else 0), 1)
        return Drain((jobs - 1) / (last - first), *cpu.per_job_ms(measured))
    finally:
        client.close()
        _cleanup(run)


# -- ack latency ------------------------------------------------------------------------------
_PROBE = """
import json, sys, time
import redis
from benchmarks.bench_app import KIND, RUN, REDIS_URL, app, timed

marks = redis.Redis.from_url(REDIS_URL)
if KIND == "celery":
    def acked(result):
        return marks.hlen(f"{RUN}:unacked") == 0
else:
    conn = app.connection_for_write()
    conn.ensure_connection()
    store = conn.transport.backend
    def acked(result):
        record = store.record(result.id)
        return record is not None and record.state == "completed"

def until(check, timeout=30.0):
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit("timed out")
        time.sleep(0.0002)
    return time.time()

timed.delay(-1)  # warm up: the worker is ready once it ran
until(lambda: marks.get(f"{RUN}:returned:-1") is not None, timeout=60)
out = []
for i in range(int(sys.argv[1])):
    result = timed.delay(i)
    until(lambda: marks.get(f"{RUN}:returned:{i}") is not None)
    seen = until(lambda: acked(result))
    out.append(seen - float(marks.get(f"{RUN}:returned:{i}")))
    time.sleep(0.02)
print(json.dumps(out))
"""


def ack_latency(kind: str, pool: Pool, jobs: int) -> list[float]:
    """Seconds from each task body's return to its ack being durable in the store."""
    run = f"bench-{kind}-{uuid.uuid4().hex[:8]}"
    proc = _worker(kind, run, pool)
    try:
        out = subprocess.run([sys.executable, "-c", _PROBE, str(jobs)], env=_env(kind, run),
                             cwd=ROOT, check=True, capture_output=True, text=True)
        return [float(x) for x in json.loads(out.stdout.strip().splitlines()[-1])]
    finally:
        _stop(proc)
        _cleanup(run)


def _cpu(figures: Drain) -> str:
    return f"{figures.parent_ms:.3f} / {figures.pool_ms:.3f}"


def _ms(values: list[float]) -> str:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return (f"{statistics.median(ordered) * 1000:8.1f} {p95 * 1000:8.1f} "
            f"{ordered[-1] * 1000:8.1f}")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--latency-jobs", type=int, default=40)
    parser.add_argument("--publish-jobs", type=int, default=4000)
    parser.add_argument("--kill-jobs", type=int, default=600)
    parser.add_argument("--pools", default="solo,prefork,threads,gevent",
                        help="the pools to run (comma-separated first words)")
    args = parser.parse_args(argv)
    pools = [p for p in POOLS if p.name.split()[0] in args.pools.split(",")]
    rates: dict[tuple[str, str], float] = {}
    print(f"drain: {args.jobs} jobs per row (no-op; the threads and gevent rows sleep "
          f"{SLEEP_S * 1000:.0f} ms), late acks, prefetch multiplier 4; the worker's CPU "
          "per job (ms): main process / pool processes")
    print(f"{'pool':16} {'plain Celery/s':>15} {'celery-plus/s':>15} {'ratio':>7}"
          f"   {'plain CPU/job':>15} {'celery-plus CPU/job':>20}")
    for pool in pools:
        found = {kind: drain(kind, pool, args.jobs) for kind in ("celery", "plus")}
        for kind, figures in found.items():
            rates[kind, pool.name] = figures.rate
        plain, ours = found["celery"], found["plus"]
        print(f"{pool.name:16} {plain.rate:15.0f} {ours.rate:15.0f} "
              f"{ours.rate / plain.rate:6.2f}x   {_cpu(plain):>15} {_cpu(ours):>20}")
    if POOLS[0] in pools:
        solo = POOLS[0].name
        for kind in ("plus-pg", "plus-pg-async"):
            figures = drain(kind, POOLS[0], args.jobs)
            rates[kind, solo] = figures.rate
            print(f"{CONFIGS[kind][0]}, solo: {figures.rate:.0f}/s; vs plain Celery "
                  f"solo on redis://: {figures.rate / rates['celery', solo]:.2f}x; "
                  f"CPU/job {_cpu(figures)} ms")
    for pool in (p for p in pools if p.name.split()[0] in ("solo", "threads")):
        rates["dramatiq", pool.name] = drain("dramatiq", pool, args.jobs).rate
        print(f"Dramatiq, 1 process x 8 threads, {'no-op' if not pool.sleep_s else '10 ms'} "
              f"task: {rates['dramatiq', pool.name]:.0f}/s; celery-plus {pool.name} / "
              f"Dramatiq: {rates['plus', pool.name] / rates['dramatiq', pool.name]:.2f}x")
    latencies: dict[tuple[str, str], list[float]] = {}
    print(f"\nack latency: task body returns -> ack durable in the store, "
          f"{args.latency_jobs} jobs one at a time (ms)")
    print(f"{'configuration':44} {'median':>8} {'p95':>8} {'max':>8}")
    rows = [(kind, pool) for pool in pools for kind in ("celery", "plus")]
    if POOLS[1] in pools:
        rows += [("plus-pg", POOLS[1]), ("plus-sqlite", POOLS[1])]
    for kind, pool in rows:
        found = latencies[kind, pool.name] = ack_latency(kind, pool, args.latency_jobs)
        print(f"{CONFIGS[kind][0] + ', ' + pool.name:44} {_ms(found)}")
    print()
    enqueue = publishers.report(args.publish_jobs, [1, 8])
    windows = kill_window.report(args.kill_jobs, ["plus", "plus-pg", "plus-sqlite"])
    return {"drain": {f"{k}/{p}": v for (k, p), v in rates.items()},
            "ack_latency_ms": {f"{k}/{p}": [round(x * 1000, 2) for x in v]
                               for (k, p), v in latencies.items()},
            "enqueue": enqueue, "kill_window": {k: vars(w) for k, w in windows.items()}}


if __name__ == "__main__":
    main()
