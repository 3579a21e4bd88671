"""What the admin's index of enqueued jobs by task (``jobs_ready_by_name``: PostgreSQL migration
0014, SQLite ``schema.sql``) costs the worker's path: store-level ``publish_many`` (blocks of 500
jobs of 5 task names, 200-byte messages) and a claim-and-ack drain (100 a claim), with the index
and with it dropped, in a fresh store each, rounds alternating which goes first. Prints jobs per
second per round (the load average at its start beside it) and the medians.

    python -m benchmarks.admin_index_cost [--stores postgres,sqlite] [--jobs 10000] [--rounds 4]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator

import psycopg

from celery_plus.model.options import StoreOptions
from celery_plus.model.store import Backend, NewJob, Settle
from celery_plus.stores.postgres.backend import PostgresBackend
from celery_plus.stores.sqlite.backend import SQLiteBackend

PG_URL = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")
INDEX = "jobs_ready_by_name"


@contextlib.contextmanager
def store(kind: str, with_index: bool) -> Iterator[Backend]:
    """A fresh store of ``kind`` (its schema applied), the index dropped unless ``with_index``."""
    if kind == "postgres":
        schema = f"bench_ix_{uuid.uuid4().hex[:8]}"
        pg = PostgresBackend(PG_URL, StoreOptions(), schema=schema)
        try:
            pg.publish_many([NewJob(id="warm", queue="bench", message="m", name="warm")])
            if not with_index:
                with psycopg.connect(PG_URL, autocommit=True) as conn:
                    conn.execute(f'DROP INDEX "{schema}".{INDEX}')
            yield pg
        finally:
            pg.close()
            with psycopg.connect(PG_URL, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        return
    with tempfile.TemporaryDirectory(prefix="index-cost-") as tmp:
        path = os.path.join(tmp, "store.db")
        lite = SQLiteBackend(f"sqlite:///{path}")
        try:
            lite.publish_many([NewJob(id="warm", queue="bench", message="m", name="warm")])
            if not with_index:
                with sqlite3.connect(path) as conn:
                    conn.execute(f"DROP INDEX {INDEX}")
            yield lite
        finally:
            lite.close()


def rates(backend: Backend, jobs: int) -> tuple[float, float]:
    """(publish, drain) jobs per second."""
    tag = uuid.uuid4().hex[:6]
    started = time.perf_counter()
    for start in range(0, jobs, 500):
        backend.publish_many([NewJob(id=f"{tag}-{i}", queue="bench", message="m" * 200,
                                     name=f"bench.t{i % 5}")
                              for i in range(start, min(start + 500, jobs))])
    publish = jobs / (time.perf_counter() - started)
    started, done = time.perf_counter(), 0
    while claims := backend.claim(["bench"], "bench-worker", 100).claims:
        backend.settle([Settle(c.job_id, c.token, "ack", {}) for c in claims])
        done += len(claims)
    return publish, done / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stores", default="postgres,sqlite")
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    for kind in (k.strip() for k in args.stores.split(",") if k.strip()):
        got: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
        for r in range(args.rounds):
            for with_index in ((True, False) if r % 2 == 0 else (False, True)):
                load = os.getloadavg()[0]
                with store(kind, with_index) as backend:
                    got[with_index].append(rates(backend, args.jobs))
                publish, drain = got[with_index][-1]
                print(f"{kind} round {r + 1} index={with_index} (load {load:.1f}): "
                      f"publish {publish:,.0f}/s, drain {drain:,.0f}/s", flush=True)
        for with_index in (True, False):
            print(f"{kind} index={with_index}: publish median "
                  f"{statistics.median(p for p, _ in got[with_index]):,.0f}/s, drain median "
                  f"{statistics.median(d for _, d in got[with_index]):,.0f}/s", flush=True)


if __name__ == "__main__":
    main()
