"""Each run's own stores: two private Redis servers (the store's and the marks'), the run's
PostgreSQL schema with the peer's tables, and the cleaning after a run."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import psycopg
import redis

from benchmarks.bench_app import pg_schema
from benchmarks.memory import private_redis
from benchmarks.throughput import ROOT, _cleanup

from .systems import System


@dataclass(frozen=True)
class Servers:
    store: str  # Redis URL of the store's server (Redis systems)
    marks: str  # Redis URL of the marks' server (every system)
    pg: str  # PostgreSQL URL


@contextlib.contextmanager
def private_servers(pg: str) -> Iterator[Servers]:
    """Two redis-servers of this invocation's own, so ``INFO commandstats`` is the store's."""
    with private_redis() as store, private_redis() as marks:
        yield Servers(store, marks, pg)


def env(system: System, run: str, servers: Servers) -> dict[str, str]:
    """The environment of every process of a run."""
    path = os.pathsep.join(p for p in (system.code, str(ROOT)) if p)
    return {**os.environ, "BENCH_KIND": system.kind or system.key, "BENCH_RUN": run,
            "BENCH_REDIS": servers.store, "BENCH_MARKS": servers.marks, "BENCH_PG": servers.pg,
            "BENCH_PG_SCHEMA": pg_schema(run), "PGQUEUER_SCHEMA": pg_schema(run),
            "PGDSN": servers.pg, "PYTHONPATH": path}


def prepare(system: System, run: str, servers: Servers) -> None:
    """Create the run's schema and install the peer's tables in it (PgQueuer, Procrastinate)."""
    if system.key not in ("pgqueuer", "procrastinate"):
        return
    with psycopg.connect(servers.pg, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{pg_schema(run)}"')
    if system.key == "pgqueuer":
        cmd = [sys.executable, "-m", "pgqueuer", "install"]
    else:
        cmd = [sys.executable, "-m", "procrastinate", "--app",
               "benchmarks.peers.procrastinate_app.app", "schema", "--apply"]
    subprocess.run(cmd, env=env(system, run, servers), cwd=ROOT, check=True,
                   capture_output=True)


def clean(system: System, run: str, servers: Servers) -> None:
    """Drop whatever the run left: its schema, its SQLite file, both private servers' keys."""
    for url in (servers.store, servers.marks):
        client = redis.Redis.from_url(url)
        client.flushall()  # the invocation's own servers (benchmarks.memory.private_redis)
        client.close()
    if system.kind.startswith("plus"):
        _cleanup(run)
    elif system.store == "pg":
        with psycopg.connect(servers.pg, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{pg_schema(run)}" CASCADE')
