"""Claim cost stays flat as finished rows pile up: the PostgreSQL store with 1,000,000 completed
rows retained vs an empty one.

Two schemas of the same database: ``empty`` and ``full`` (1,000,000 ``completed`` job rows with
200-byte messages, then VACUUM ANALYZE, as autovacuum would leave them). In each, N jobs are
published, then claimed by one claimer in batches of 10, each claim carrying the acks of the
previous batch (as a worker does), until the queue is empty. Claim throughput = N / time.
Rounds alternate between the two schemas; the best round of each counts. Target: the full
store within 20% of the empty one (ratio >= 0.8) — the partial indexes (``jobs_ready`` on
enqueued rows only, etc.) never see the retained rows.

    python -m benchmarks.pg_claim_flat [--rows 1000000] [--jobs 5000] [--rounds 3]
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
QUEUE = "bench"
BATCH = 10


def fill(schema: str, rows: int) -> float:
    """Insert ``rows`` completed jobs into ``schema``; seconds taken (with VACUUM ANALYZE)."""
    started = time.perf_counter()
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{schema}"')
        for start in range(0, rows, 100_000):
            conn.execute(
                "INSERT INTO jobs (id, queue, name, msg, state, score, token, deliveries, "
                "enqueued_ms, started_ms, finished_ms, worker) "
                "SELECT 'done-' || g, %s, 'bench.noop', convert_to(repeat('x', 200), 'UTF8'), "
                "'completed', g, 1, 1, now_ms() - 60000, now_ms() - 30000, "
                "now_ms() - 30000 + g / 1000, 'bench-worker' "
                "FROM generate_series(%s::bigint, %s::bigint) g",
                [QUEUE, start + 1, min(start + 100_000, rows)])
        conn.execute("VACUUM ANALYZE jobs")
    return time.perf_counter() - started


def claim_rate(backend: PostgresBackend, jobs: int) -> float:
    """Publish ``jobs``, then claim them all in batches (acking as we go); claims per second."""
    tag = uuid.uuid4().hex[:8]
    for start in range(0, jobs, 500):
        backend.publish_many([NewJob(id=f"{tag}-{i}", queue=QUEUE, message="m" * 200,
                                     name="bench.noop")
                              for i in range(start, min(start + 500, jobs))])
    settles: list[Settle] = []
    claimed = 0
    started = time.perf_counter()
    while True:
        got = backend.claim([QUEUE], "bench", BATCH, settles).claims
        if not got:
            break
        claimed += len(got)
        settles = [Settle(c.job_id, c.token, "ack") for c in got]
    backend.settle(settles)
    elapsed = time.perf_counter() - started
    assert claimed == jobs, f"claimed {claimed} of {jobs}"
    return jobs / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--jobs", type=int, default=5_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    run = uuid.uuid4().hex[:8]
    schemas = {"empty": f"bench_flat_empty_{run}", "full": f"bench_flat_full_{run}"}
    # Retention far beyond the run, so no maintenance would prune the retained rows.
    keep = (10 * 86_400_000, 10_000_000, 10 * 86_400_000, 10_000_000)
    backends = {kind: PostgresBackend(PG_URL, StoreOptions(retention=keep), schema=schema)
                for kind, schema in schemas.items()}
    try:
        print(f"filling {args.rows:,} completed rows ...", flush=True)
        print(f"  {fill(schemas['full'], args.rows):.1f} s")
        best = {kind: 0.0 for kind in schemas}
        for round_no in range(args.rounds):
            for kind, backend in backends.items():
                rate = claim_rate(backend, args.jobs)
                best[kind] = max(best[kind], rate)
                print(f"  round {round_no + 1} {kind:5}: {rate:8.0f} claims/s", flush=True)
        print(f"{args.jobs} jobs claimed in batches of {BATCH} (acks carried by the next "
              f"claim), best of {args.rounds} round(s)")
        print(f"  empty store:                     {best['empty']:8.0f} claims/s")
        print(f"  {args.rows:>9,} completed rows kept: {best['full']:8.0f} claims/s")
        ratio = best["full"] / best["empty"]
        verdict = "within 20%" if ratio >= 0.8 else "NOT within 20%"
        print(f"ratio full/empty: {ratio:.2f} ({verdict})")
    finally:
        for backend in backends.values():
            backend.close()
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            for schema in schemas.values():
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


if __name__ == "__main__":
    main()
