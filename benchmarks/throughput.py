"""Enqueue and drain throughput: plain Celery on redis:// vs celery-plus on plus+redis://.

Both run in one invocation on the same machine with the same worker settings (one solo worker
process, late acks, prefetch multiplier 4, results ignored) and N no-op jobs. Enqueue rate:
N ``delay()`` calls from one process, no worker running. Drain rate: the worker starts on the
full queue; jobs per second between the first and the last job's start.

    python -m benchmarks.throughput --jobs 10000 [--rounds 1] [--configs plus,plus-hash,...]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path

import redis

from .marks import await_mark

ROOT = Path(__file__).resolve().parents[1]
REDIS_URL = os.environ.get("BENCH_REDIS", "redis://127.0.0.1:6379/0")
PG_URL = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")

CONFIGS = {
    "celery": ("plain Celery, redis://", [sys.executable, "-m", "celery"]),
    "plus": ("celery-plus, plus+redis://", [sys.executable, "-m", "celery_plus.cli"]),
    "plus-hash": ("celery-plus, plus+redis://, hash layout",
                  [sys.executable, "-m", "celery_plus.cli"]),
    "plus-sqlite": ("celery-plus, plus+sqlite://", [sys.executable, "-m", "celery_plus.cli"]),
    "plus-pg": ("celery-plus, plus+postgresql://", [sys.executable, "-m", "celery_plus.cli"]),
    "plus-pg-async": ("celery-plus, plus+postgresql://, async commit",
                      [sys.executable, "-m", "celery_plus.cli"]),
}


@dataclass
class Figures:
    enqueue_rate: float
    drain_rate: float
    bulk_rate: float | None = None


def _env(kind: str, run: str) -> dict[str, str]:
    return {**os.environ, "BENCH_KIND": kind, "BENCH_RUN": run, "BENCH_REDIS": REDIS_URL,
            "BENCH_PG": PG_URL, "PYTHONPATH": str(ROOT)}


def _enqueue(kind: str, run: str, jobs: int, bulk: bool = False) -> float:
    """``delay()`` N times; with ``bulk``, inside ``app.publish_batch()`` blocks of 500."""
    loop = (
        "for start in range(0, n, 500):\n"
        "    with app.publish_batch():\n"
        "        for i in range(start, min(start + 500, n)):\n"
        "            noop.delay(i, n)\n"
    ) if bulk else (
        "for i in range(n):\n"
        "    noop.delay(i, n)\n"
    )
    code = (
        "import time, sys\n"
        "from benchmarks.bench_app import app, noop\n"
        f"n = {jobs}\n"
        "noop.delay(-1, n)\n"  # warm up connections and declarations
        "t0 = time.perf_counter()\n"
        f"{loop}"
        "print(time.perf_counter() - t0)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=_env(kind, run), cwd=ROOT,
                         check=True, capture_output=True, text=True)
    return jobs / float(out.stdout.strip().splitlines()[-1])


def _drain(kind: str, run: str, jobs: int, timeout: float = 600) -> float:
    client = redis.Redis.from_url(REDIS_URL)
    cmd = [*CONFIGS[kind][1], "-A", "benchmarks.bench_app", "worker", "--pool=solo",
           "--concurrency=1", "--loglevel=WARNING", "--without-gossip", "--without-mingle",
           "--without-heartbeat", f"--hostname={run}@%h"]
    proc = subprocess.Popen(cmd, env=_env(kind, run), cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        await_mark(client, f"{run}:mark:{jobs - 1}", proc, timeout, f"{kind}, {jobs} jobs",
                   poll_s=0.05)
        first = float(client.get(f"{run}:mark:0") or 0)
        last = float(client.get(f"{run}:mark:{jobs - 1}") or 0)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        client.close()
        _cleanup(run)
    return (jobs - 1) / (last - first)


def measure(kind: str, jobs: int) -> Figures:
    run = f"bench-{kind}-{uuid.uuid4().hex[:8]}"
    bulk = None
    if kind != "celery":
        bulk_run = f"bench-{kind}-bulk-{uuid.uuid4().hex[:8]}"
        bulk = _enqueue(kind, bulk_run, jobs, bulk=True)
        _cleanup(bulk_run)
    enqueue = _enqueue(kind, run, jobs)
    drain = _drain(kind, run, jobs)
    return Figures(enqueue, drain, bulk)


def _cleanup(run: str) -> None:
    client = redis.Redis.from_url(REDIS_URL)
    for key in client.scan_iter(f"{run}*", count=1000):
        client.delete(key)
    client.close()
    for path in Path(tempfile.gettempdir()).glob(f"{run}.db*"):
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink()
    if "-plus-pg-" in run:
        import psycopg

        # The run's schema, named as bench_app.pg_schema names it.
        schema = "".join(c if c.isalnum() else "_" for c in run.lower())[:48]
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--configs", default=",".join(CONFIGS))
    args = parser.parse_args()
    kinds = ["celery", *(k for k in args.configs.split(",") if k != "celery")]
    results: dict[str, list[Figures]] = {kind: [] for kind in kinds}
    for _ in range(args.rounds):
        for kind in kinds:
            results[kind].append(measure(kind, args.jobs))
    best = {
        k: Figures(
            max(f.enqueue_rate for f in v),
            max(f.drain_rate for f in v),
            max((f.bulk_rate for f in v if f.bulk_rate is not None), default=None),
        )
        for k, v in results.items()
    }
    print(f"{args.jobs} no-op jobs, best of {args.rounds} round(s), one solo worker, late acks")
    print(f"{'configuration':32} {'enqueue/s':>12} {'drain/s':>12} {'batch enqueue/s':>16}")
    for kind, figures in best.items():
        batch = f"{figures.bulk_rate:16.0f}" if figures.bulk_rate else f"{'-':>16}"
        print(f"{CONFIGS[kind][0]:32} {figures.enqueue_rate:12.0f} {figures.drain_rate:12.0f}"
              f" {batch}")
    base = best["celery"]
    for kind in kinds:
        if kind == "celery":
            continue
        ours = best[kind]
        batch = (ours.bulk_rate or 0) / base.enqueue_rate
        print(f"ratio {kind}/celery: enqueue {ours.enqueue_rate / base.enqueue_rate:.2f}x, "
              f"drain {ours.drain_rate / base.drain_rate:.2f}x, "
              f"batch enqueue (publish_batch vs plain delay) {batch:.2f}x")


if __name__ == "__main__":
    main()
