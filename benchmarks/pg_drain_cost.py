"""What a solo PostgreSQL worker's drain costs the server per job (issue #29), a figure the
machine's load does not move: transactions committed and rolled back, store function calls by
function (with their server time) and WAL bytes, per job drained.

Each run fills a queue (batch enqueue), reads the database's counters, starts the system's solo
worker (as ``benchmarks.peers`` does), waits for the last job, stops the worker and reads them
again. ``BENCH_PG`` must name a database nothing else uses (the counters are the database's:
``pg_stat_database``, ``pg_stat_user_functions``, ``pg_current_wal_lsn``); function counts need
``track_functions = 'pl'`` there (``ALTER DATABASE … SET track_functions = 'pl'``).

    BENCH_PG=postgresql://postgres@127.0.0.1:5432/pgdrain \\
        python -m benchmarks.pg_drain_cost [--systems plus-pg,pgqueuer] [--jobs 3000] [--base DIR]
"""

from __future__ import annotations

import argparse
import os
import time
import uuid
from dataclasses import dataclass

import psycopg

from benchmarks.bench_app import pg_schema
from benchmarks.peers.rounds import _drain, _fill
from benchmarks.peers.servers import Servers, clean, prepare, private_servers
from benchmarks.peers.systems import BY_KEY, System, based

#: Seconds the counters must stay still before a reading counts (the server flushes a
#: backend's statistics when it ends, a moment after its client closed).
SETTLE_S = 0.5


@dataclass(frozen=True)
class Reading:
    commits: int
    rollbacks: int
    wal: int
    functions: dict[str, tuple[int, float]]  # name -> (calls, self time ms)


#: The transactions one reading adds to the counters, once its session ended: the session's
#: start (the server reads its catalogs in one) and the reading's own.
READING_XACTS = 2
#: The readings made so far.
_reads = 0


def _read(url: str, schema: str) -> Reading:
    """The database's counters now, less the earlier readings' own transactions."""
    global _reads
    with psycopg.connect(url) as conn:  # one transaction, one commit
        commits, rollbacks, wal = conn.execute(
            "SELECT xact_commit, xact_rollback, pg_current_wal_lsn() - '0/0'::pg_lsn, "
            "pg_stat_clear_snapshot() FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()[:3]
        functions = {str(name): (int(calls), float(self_ms)) for name, calls, self_ms in
                     conn.execute("SELECT funcname, calls, self_time FROM pg_stat_user_functions "
                                  "WHERE schemaname = %s", [schema]).fetchall()}
    earlier, _reads = _reads, _reads + 1
    return Reading(int(commits) - READING_XACTS * earlier, int(rollbacks), int(wal), functions)


def _still(url: str, schema: str) -> Reading:
    """A reading once the counters stopped moving (the server counts a session's work when
    the session ends, a moment after its client closed)."""
    last = _read(url, schema)
    while True:
        time.sleep(SETTLE_S)
        now = _read(url, schema)
        if (now.commits, now.rollbacks, now.functions) == (
                last.commits, last.rollbacks, last.functions):
            return now
        last = now


def measure(system: System, servers: Servers, jobs: int) -> tuple[float, str]:
    """One filled queue drained by ``system``'s solo worker: its rate and the cost line."""
    run = f"peers-{system.key}-{uuid.uuid4().hex[:8]}"
    schema = pg_schema(run)
    prepare(system, run, servers)
    try:
        _fill(system, run, servers, jobs, "batch")
        before = _still(servers.pg, schema)
        rate, _ = _drain(system, "solo", run, servers, jobs)
        after = _still(servers.pg, schema)
    finally:
        clean(system, run, servers)
    calls = {name: (c - before.functions.get(name, (0, 0.0))[0],
                    ms - before.functions.get(name, (0, 0.0))[1])
             for name, (c, ms) in after.functions.items()}
    by_fn = ", ".join(f"{name} {c / jobs:.3f} ({ms * 1000 / jobs:.0f} µs)"
                      for name, (c, ms) in sorted(calls.items(), key=lambda kv: -kv[1][0]) if c)
    return rate, (f"commits {(after.commits - before.commits) / jobs:.3f}/job, rollbacks "
                  f"{(after.rollbacks - before.rollbacks) / jobs:.3f}/job, WAL "
                  f"{(after.wal - before.wal) / jobs:.0f} B/job; calls/job: {by_fn or '-'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--systems", default="plus-pg,pgqueuer")
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--base", help="a checkout whose celery_plus runs as base-KEY too")
    args = parser.parse_args()
    systems = [BY_KEY[key] for key in args.systems.split(",")]
    if args.base:
        systems += [based(s, args.base) for s in systems if s.kind.startswith("plus")]
    pg = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")
    with private_servers(pg) as servers:
        for r in range(args.rounds):
            for system in systems:
                load = os.getloadavg()[0]
                rate, cost = measure(system, servers, args.jobs)
                print(f"round {r + 1} {system.key} (load {load:.2f}): solo {rate:,.0f}/s; {cost}",
                      flush=True)


if __name__ == "__main__":
    main()
