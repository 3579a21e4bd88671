"""Drain rate with 1, 2, 4 and 8 worker processes, and the store's CPU per publish and per job.

Issue #17's scaling curve and the inputs of the capacity model in docs/scaling.md. For each
configuration — plain Celery on ``redis://`` (the reference curve), celery-plus on
``plus+redis://`` and on ``plus+postgresql://`` — and each worker count N:

1. ``--jobs`` ``counted`` jobs are published with ``delay()``, one call each, by one publisher
   process; the store's CPU meanwhile, divided by the jobs, is its **CPU per publish**;
2. N ``--pool solo`` workers start on the full queue; the drain rate is completions per second
   between the first and the last completion, and the store's CPU between them, divided by the
   jobs completed between them, is its **CPU per job** (claim, ack and their share of
   heartbeats and maintenance).

The stores run on servers of the run's own, so their CPU is the run's alone: a private ``redis-
server`` (both Redis configurations, one after the other) and a private PostgreSQL cluster
(``initdb`` as the ``postgres`` user, on a free port of 5500 to 5510; removed afterwards). Store
CPU is read from ``/proc`` (Redis: its process; PostgreSQL: the postmaster and every backend).
The tasks' completion marks go to the Redis of ``BENCH_MARKS`` (the test Redis), not to the
store measured. The machine's cores are shared by the workers, the publisher and the store: with
N above the number of cores, the curve shows where the machine, not the store, is the ceiling.

    python -m benchmarks.scaling [--jobs 8000] [--workers 1,2,4,8]
                                 [--configs celery,plus,plus-hash,plus-pg]
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import redis

from .cpu import WorkerCPU
from .memory import private_redis
from .ports import POSTGRES_PORTS, free_port
from .throughput import CONFIGS, ROOT

MARKS_URL = os.environ.get("BENCH_MARKS", "redis://127.0.0.1:6379/0")


@dataclass(frozen=True)
class Store:
    """A store server of the run's own: its URL and the pid whose CPU is the store's."""

    url: str
    pid: int


@dataclass(frozen=True)
class Point:
    workers: int
    rate: float
    publish_us: float
    job_us: float


@contextlib.contextmanager
def private_postgres() -> Iterator[Store]:
    """A PostgreSQL cluster of this run's own (trust auth, database ``test``)."""
    bindir = sorted(glob.glob("/usr/lib/postgresql/*/bin"))[-1]
    folder = tempfile.mkdtemp(prefix="bench-scaling-pg-")
    shutil.chown(folder, "postgres")
    port = free_port(POSTGRES_PORTS)
    data = f"{folder}/data"

    def as_postgres(*cmd: str) -> None:
        subprocess.run(["runuser", "-u", "postgres", "--", *cmd], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    as_postgres(f"{bindir}/initdb", "-D", data, "--auth=trust", "-U", "postgres")
    as_postgres(f"{bindir}/pg_ctl", "-D", data, "-l", f"{folder}/log", "-w", "-o",
                f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c max_connections=200",
                "start")
    try:
        as_postgres(f"{bindir}/psql", "-h", "127.0.0.1", "-p", str(port), "-U", "postgres",
                    "-c", "CREATE DATABASE test")
        pid = int(Path(f"{data}/postmaster.pid").read_text().split()[0])
        yield Store(f"postgresql://postgres@127.0.0.1:{port}/test", pid)
    finally:
        as_postgres(f"{bindir}/pg_ctl", "-D", data, "-m", "immediate", "stop")
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def private_redis_store() -> Iterator[Store]:
    with private_redis() as url:
        port = url.rsplit(":", 1)[1].split("/")[0]
        pid = int(subprocess.run(["pgrep", "-f", f"redis-server 127.0.0.1:{port}"],
                                 capture_output=True, text=True, check=True).stdout.split()[0])
        yield Store(url, pid)


def _env(kind: str, run: str, store: Store) -> dict[str, str]:
    env = {**os.environ, "BENCH_KIND": kind, "BENCH_RUN": run, "BENCH_MARKS": MARKS_URL,
           "PYTHONPATH": str(ROOT)}
    env["BENCH_PG" if kind == "plus-pg" else "BENCH_REDIS"] = store.url
    return env


def _publish(kind: str, run: str, jobs: int, store: Store) -> float:
    """``delay()`` ``jobs`` times from one process; the store's CPU µs per publish."""
    code = ("from benchmarks.bench_app import counted\n"
            f"for i in range({jobs}):\n    counted.delay(i, {jobs}, 0.0)\n")
    cpu = WorkerCPU(store.pid)
    cpu.start()
    proc = subprocess.Popen([sys.executable, "-c", code], env=_env(kind, run, store), cwd=ROOT)
    while proc.poll() is None:  # a backend serving the publisher is sampled while it lives
        cpu.sample()
        time.sleep(0.05)
    cpu.sample()
    if proc.returncode:
        raise RuntimeError(f"{kind}: the publisher failed ({proc.returncode})")
    return 1000 * sum(cpu.per_job_ms(jobs))


def _drain(kind: str, run: str, jobs: int, workers: int, store: Store,
           timeout: float = 900) -> tuple[float, float]:
    """N solo workers on the full queue: (jobs per second, store CPU µs per job)."""
    marks = redis.Redis.from_url(MARKS_URL)
    cmd = [*CONFIGS[kind][1], "-A", "benchmarks.bench_app", "worker", "--pool=solo",
           "--concurrency=1", "--loglevel=WARNING", "--without-gossip", "--without-mingle",
           "--without-heartbeat"]
    procs = [subprocess.Popen([*cmd, f"--hostname={run}-{n}@%h"], env=_env(kind, run, store),
                              cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
             for n in range(workers)]
    cpu = WorkerCPU(store.pid)
    try:
        deadline = time.monotonic() + timeout
        done_at_start = -1
        while marks.get(f"{run}:mark:last") is None:
            if any(proc.poll() is not None for proc in procs):
                raise RuntimeError(f"{kind}: a worker exited")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{kind} x{workers} did not drain in {timeout}s")
            if done_at_start >= 0:
                cpu.sample()
            elif marks.get(f"{run}:mark:first") is not None:
                cpu.start()
                done_at_start = int(marks.get(f"{run}:bench-done") or 0)
            time.sleep(0.005 if done_at_start < 0 else 0.05)
        cpu.sample()
        first = float(marks.get(f"{run}:mark:first") or 0)
        last = float(marks.get(f"{run}:mark:last") or 0)
        measured = max(jobs - max(done_at_start, 0), 1)
        return (jobs - 1) / (last - first), 1000 * sum(cpu.per_job_ms(measured))
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for key in marks.scan_iter(f"{run}:*", count=1000):
            marks.delete(key)
        marks.close()


def _clear(kind: str, store: Store) -> None:
    if kind == "plus-pg":
        import psycopg

        with psycopg.connect(store.url, autocommit=True) as conn:
            for (schema,) in conn.execute(
                    "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'scale_%'").fetchall():
                conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
    else:
        client = redis.Redis.from_url(store.url)
        client.flushdb()
        client.close()


def curve(kind: str, jobs: int, counts: list[int], store: Store) -> list[Point]:
    points = []
    for workers in counts:
        run = f"scale-{kind}-{workers}-{uuid.uuid4().hex[:8]}"
        try:
            publish_us = _publish(kind, run, jobs, store)
            rate, job_us = _drain(kind, run, jobs, workers, store)
        finally:
            _clear(kind, store)
        points.append(Point(workers, rate, publish_us, job_us))
        print(f"  {kind:9} x{workers}: {rate:7.0f} jobs/s; store CPU {publish_us:6.1f} µs per "
              f"publish, {job_us:6.1f} µs per job; load average {os.getloadavg()[0]:.1f}",
              flush=True)
    return points


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=8000)
    parser.add_argument("--workers", default="1,2,4,8")
    parser.add_argument("--configs", default="celery,plus,plus-pg")
    args = parser.parse_args()
    counts = [int(n) for n in args.workers.split(",")]
    kinds = args.configs.split(",")
    print(f"{os.cpu_count()} cores; load average before: {os.getloadavg()[0]:.1f}", flush=True)
    results: dict[str, list[Point]] = {}
    with contextlib.ExitStack() as stack:
        for kind in kinds:
            if kind == "plus-pg":
                store = stack.enter_context(private_postgres())
            else:
                store = stack.enter_context(private_redis_store())
            results[kind] = curve(kind, args.jobs, counts, store)
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    print(f"\n{args.jobs} jobs per point, solo workers; drain jobs/s (store CPU µs per job)")
    print(f"{'configuration':42}" + "".join(f"{f'x{n}':>18}" for n in counts))
    for kind, points in results.items():
        cells = "".join(f"{f'{p.rate:,.0f} ({p.job_us:.0f})':>18}" for p in points)
        print(f"{CONFIGS[kind][0]:42}{cells}")
    print("\nstore CPU per publish (delay(), one publisher), µs: " + "; ".join(
        f"{CONFIGS[kind][0]} {min(p.publish_us for p in points):.0f} to "
        f"{max(p.publish_us for p in points):.0f}" for kind, points in results.items()))


if __name__ == "__main__":
    main()
