"""PostgreSQL drain rate against the number of jobs waiting (issue #29: 999 -> 645 jobs/s from
3,000 to 20,000 waiting).

For each ``--jobs`` size: a fresh schema, the jobs published (``publish_many``, 300-byte
messages), then drained by one claimer as a solo worker's loop does it (claims of ``--batch``,
each carrying the acks of the previous one) until the queue is empty. Prints the whole drain's
claims per second and those of its first and last ``--window`` jobs, with the load average.
Nothing but this process works on the schema (no VACUUM runs in between unless autovacuum
does).

    python -m benchmarks.pg_drain_flat [--jobs 3000,20000] [--batch 4] [--window 1000]
"""

from __future__ import annotations

import argparse
import os
import time
import uuid

import psycopg

from celery_plus.model.options import StoreOptions
from celery_plus.model.store import NewJob, Settle
from celery_plus.stores.postgres.backend import PostgresBackend

PG_URL = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")


def drain(jobs: int, batch: int, window: int) -> tuple[float, float, float]:
    """(whole drain, first window, last window) in claims per second."""
    schema = f"bench_drain_{uuid.uuid4().hex[:8]}"
    backend = PostgresBackend(PG_URL, StoreOptions(), schema=schema)
    try:
        for start in range(0, jobs, 500):
            backend.publish_many([NewJob(id=f"j{i}", queue="bench", message="m" * 300,
                                         name="bench.noop")
                                  for i in range(start, min(start + 500, jobs))])
        stamps = [time.perf_counter()]
        settles: list[Settle] = []
        while got := backend.claim(["bench"], "bench", batch, settles).claims:
            settles = [Settle(c.job_id, c.token, "ack") for c in got]
            stamps.extend([time.perf_counter()] * len(got))
        backend.settle(settles)
        assert len(stamps) == jobs + 1, f"claimed {len(stamps) - 1} of {jobs}"
        return (jobs / (stamps[-1] - stamps[0]), window / (stamps[window] - stamps[0]),
                window / (stamps[-1] - stamps[-1 - window]))
    finally:
        backend.close()
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", default="3000,20000")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--window", type=int, default=1000)
    args = parser.parse_args()
    for jobs in (int(n) for n in args.jobs.split(",")):
        load = os.getloadavg()[0]
        whole, first, last = drain(jobs, args.batch, args.window)
        print(f"{jobs:>6} waiting (load {load:.2f}): {whole:,.0f} claims/s; first "
              f"{args.window}: {first:,.0f}/s, last {args.window}: {last:,.0f}/s "
              f"(last/first {last / first:.2f})", flush=True)


if __name__ == "__main__":
    main()
