"""A solo worker's CPU time per job drained, head and base interleaved (issue #29).

A rate moves with the machine's load; the worker's own CPU time (``/proc/PID/stat``, user +
system) per job barely does. Each run fills a queue with the batch enqueue, starts the solo
worker, reads its CPU time when the first job marks its completion and again when the last
does (the marks are polled every 2 ms): the difference over the jobs in between is the CPU a
job costs the worker, its start excluded.

    python -m benchmarks.drain_cpu [--systems plus-pg,plus] [--jobs 20000] [--rounds 3]
                                   [--base CHECKOUT]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time
import uuid

import redis

from benchmarks.cpu import process_cpu
from benchmarks.peers.rounds import _fill
from benchmarks.peers.servers import Servers, clean, env, prepare, private_servers
from benchmarks.peers.systems import BY_KEY, System, based
from benchmarks.pools import _stop
from benchmarks.throughput import ROOT

POLL_S = 0.002


def _await(marks: redis.Redis, key: str, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while marks.get(key) is None:
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{key}: the worker exited or did not finish")
        time.sleep(POLL_S)


def measure(system: System, servers: Servers, jobs: int) -> tuple[float, float]:
    """One filled queue drained by ``system``'s solo worker: (µs of CPU per job, jobs/s)."""
    run = f"cpu-{system.key}-{uuid.uuid4().hex[:8]}"
    prepare(system, run, servers)
    marks = redis.Redis.from_url(servers.marks)
    try:
        _fill(system, run, servers, jobs, "batch")
        proc = subprocess.Popen(system.drains["solo"](run), env=env(system, run, servers),
                                cwd=system.code or ROOT, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        try:
            _await(marks, f"{run}:mark:first", proc, 120)
            start = process_cpu(proc.pid)
            _await(marks, f"{run}:mark:last", proc, 600)
            end = process_cpu(proc.pid)
            first = float(marks.get(f"{run}:mark:first") or 0)
            last = float(marks.get(f"{run}:mark:last") or 0)
        finally:
            _stop(proc)
    finally:
        marks.close()
        clean(system, run, servers)
    return (end - start) / (jobs - 1) * 1e6, (jobs - 1) / (last - first)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--systems", default="plus-pg")
    parser.add_argument("--jobs", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--base", help="a checkout whose celery_plus runs too, interleaved")
    args = parser.parse_args()
    systems = [BY_KEY[k] for k in args.systems.split(",")]
    if args.base:
        systems = [s for head in systems for s in (head, based(head, args.base))]
    pg = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")
    results: dict[str, list[tuple[float, float]]] = {s.key: [] for s in systems}
    with private_servers(pg) as servers:
        for index in range(args.rounds):
            order = systems if index % 2 == 0 else systems[::-1]
            for system in order:
                load = os.getloadavg()[0]
                cpu, rate = measure(system, servers, args.jobs)
                results[system.key].append((cpu, rate))
                print(f"round {index + 1} {system.key}: {cpu:.0f} µs CPU per job, "
                      f"{rate:.0f} jobs/s, load {load:.1f}", flush=True)
    for key, rows in results.items():
        print(f"{key}: median {statistics.median(c for c, _ in rows):.0f} µs per job "
              f"({', '.join(f'{c:.0f}' for c, _ in rows)}), "
              f"{statistics.median(r for _, r in rows):.0f} jobs/s")


if __name__ == "__main__":
    main()
