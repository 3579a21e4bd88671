"""PgQueuer with the benchmarks' ``counted`` entrypoint, in the run's own schema.

``BENCH_PG`` is the database, ``PGQUEUER_SCHEMA`` the run's schema (``pgq install`` put the
tables there; :mod:`.servers`). Tables are logged (PgQueuer's default ``durable``); a picked job
is re-picked after 30 s without a heartbeat: at least once. Run with
``python -m benchmarks.peers.pgqueuer_app`` (``pgq run`` of PgQueuer 1.6.0 fails on its own
``--log-level`` default).
"""

from __future__ import annotations

import json
import os

import asyncpg
import psycopg
import redis
import uvloop
from pgqueuer import PgQueuer
from pgqueuer.db import AsyncpgDriver, SyncPsycopgDriver
from pgqueuer.models import Job
from pgqueuer.queries import SyncQueries

from benchmarks.marks import count_done

PG_URL = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")
RUN = os.environ.get("BENCH_RUN", "bench")
_marks = redis.Redis.from_url(os.environ.get("BENCH_MARKS", "redis://127.0.0.1:6379/0"))


async def create() -> PgQueuer:
    """The worker: one consumer, PgQueuer's defaults (batches of 10), on its asyncpg driver."""
    conn = await asyncpg.connect(PG_URL)
    pgq = PgQueuer(AsyncpgDriver(conn))

    @pgq.entrypoint("counted")
    async def counted(job: Job) -> None:
        args = json.loads(job.payload or b"{}")
        count_done(_marks, RUN, args["n"], 0.0)

    return pgq


_queries: SyncQueries | None = None


def _client() -> SyncQueries:
    global _queries
    if _queries is None:
        conn = psycopg.connect(PG_URL, autocommit=True)
        _queries = SyncQueries(SyncPsycopgDriver(conn))
    return _queries


def send(i: int, n: int) -> None:
    """Enqueue one job: one INSERT, committed."""
    _client().enqueue("counted", json.dumps({"i": i, "n": n}).encode())


def send_batch(start: int, stop: int, n: int) -> None:
    """Enqueue jobs ``start`` to ``stop`` in one statement (PgQueuer's list enqueue)."""
    count = stop - start
    payloads: list[bytes | None] = [json.dumps({"i": i, "n": n}).encode()
                                    for i in range(start, stop)]
    _client().enqueue(["counted"] * count, payloads, [0] * count)


async def _run() -> None:
    await (await create()).run()


if __name__ == "__main__":
    uvloop.run(_run())  # as ``pgq run`` does
