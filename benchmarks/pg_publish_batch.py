"""PostgreSQL batch publish: one ``publish_batch`` statement per batch against one ``publish``
call per job (pipelined, one transaction: ``publish_many`` before issue #29).

Both store the same N plain jobs (200-byte messages) in blocks of ``--block``, through the same
pool, in a fresh schema each; rounds alternate which goes first. Prints jobs per second per
round, the median of each and their ratio (the load average at each round's start beside it).

    python -m benchmarks.pg_publish_batch [--jobs 3000] [--block 500] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
import uuid
from collections.abc import Callable, Sequence

import psycopg

from celery_plus.model.options import StoreOptions
from celery_plus.model.store import NewJob
from celery_plus.stores.postgres import backend as pg_backend
from celery_plus.stores.postgres.backend import PostgresBackend

PG_URL = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")


def per_job(backend: PostgresBackend, jobs: Sequence[NewJob]) -> None:
    """The earlier ``publish_many``: ``publish`` once per job, pipelined, one transaction."""
    with backend._pool().connection() as conn, conn.transaction(), conn.pipeline():
        cursors = [conn.execute(pg_backend._PUBLISH, backend._publish_params(job))
                   for job in jobs]
        for cur in cursors:
            cur.fetchone()


def one_statement(backend: PostgresBackend, jobs: Sequence[NewJob]) -> None:
    backend.publish_many(jobs)


def rate(backend: PostgresBackend, publish: Callable[[PostgresBackend, Sequence[NewJob]], None],
         jobs: int, block: int) -> float:
    tag = uuid.uuid4().hex[:8]
    batches = [[NewJob(id=f"{tag}-{i}", queue="bench", message="m" * 200, name="bench.noop")
                for i in range(start, min(start + block, jobs))]
               for start in range(0, jobs, block)]
    publish(backend, [NewJob(id=f"{tag}-warm", queue="bench", message="m", name="bench.noop")])
    started = time.perf_counter()
    for batch in batches:
        publish(backend, batch)
    return jobs / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--block", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    ways = {"publish per job": per_job, "publish_batch": one_statement}
    figures: dict[str, list[float]] = {name: [] for name in ways}
    ratios = []
    for r in range(args.rounds):
        load = os.getloadavg()[0]
        order = list(ways) if r % 2 == 0 else list(reversed(ways))
        got = {}
        for name in order:
            schema = f"bench_pb_{uuid.uuid4().hex[:8]}"
            backend = PostgresBackend(PG_URL, StoreOptions(), schema=schema)
            try:
                got[name] = rate(backend, ways[name], args.jobs, args.block)
            finally:
                backend.close()
                with psycopg.connect(PG_URL, autocommit=True) as conn:
                    conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            figures[name].append(got[name])
        ratios.append(got["publish_batch"] / got["publish per job"])
        print(f"round {r + 1} (load {load:.2f}): "
              + ", ".join(f"{name} {got[name]:,.0f}/s" for name in ways)
              + f", ratio {ratios[-1]:.2f}x", flush=True)
    print("median: " + ", ".join(f"{name} {statistics.median(v):,.0f}/s"
                                 for name, v in figures.items())
          + f", ratio {statistics.median(ratios):.2f}x")


if __name__ == "__main__":
    main()
