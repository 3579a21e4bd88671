"""Store bytes per waiting job: plain Celery on redis:// and celery-plus on every store.

One invocation, the same N ``noop.delay(i, n)`` calls (``benchmarks/bench_app.py``) for each
configuration, no worker running, then the store's growth divided by N:

* Redis (plain Celery and ``plus+redis://``): ``used_memory`` of a private ``redis-server``
  (no persistence, started on a free port of 7200 to 7299 for the run), before and after;
* PostgreSQL: ``pg_total_relation_size`` of the run schema's tables (heap, indexes, TOAST)
  after ``VACUUM``, before and after;
* SQLite: the database file's size after a WAL checkpoint, before and after.

    python -m benchmarks.memory --jobs 20000
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import redis

from .bench_app import pg_schema
from .ports import REDIS_PORTS, free_port

ROOT = Path(__file__).resolve().parents[1]
PG_URL = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")

CONFIGS = {
    "celery": "plain Celery, redis://",
    "plus": "celery-plus, plus+redis:// (compact)",
    "plus-hash": "celery-plus, plus+redis://, hash layout",
    "plus-deflate": "celery-plus, plus+redis://, compact, plus_redis_deflate = True",
    "plus-pg": "celery-plus, plus+postgresql://",
    "plus-sqlite": "celery-plus, plus+sqlite://",
}


@contextlib.contextmanager
def private_redis() -> Iterator[str]:
    """A redis-server of this run's own (no snapshot, no AOF); its URL."""
    port = free_port(REDIS_PORTS)
    folder = tempfile.mkdtemp(prefix="bench-memory-")
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                             "--save", "", "--appendonly", "no", "--dir", folder],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis(port=port)
    try:
        for _ in range(100):
            with contextlib.suppress(redis.exceptions.ConnectionError):
                if client.ping():
                    break
            time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        client.close()
        proc.kill()
        proc.wait(timeout=10)
        shutil.rmtree(folder, ignore_errors=True)


def _publish(kind: str, run: str, jobs: int, redis_url: str) -> None:
    code = (
        "from benchmarks.bench_app import app, noop\n"
        f"for i in range({jobs}):\n"
        f"    noop.delay(i, {jobs})\n"
    )
    env = {**os.environ, "BENCH_KIND": kind, "BENCH_RUN": run, "BENCH_REDIS": redis_url,
           "BENCH_PG": PG_URL, "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-c", code], env=env, cwd=ROOT, check=True)


def _redis_used(url: str) -> int:
    client = redis.Redis.from_url(url)
    try:
        return int(client.info("memory")["used_memory"])
    finally:
        client.close()


def _pg_size(schema: str) -> int:
    import psycopg

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        tables = [name for (name,) in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,))]
        total = 0
        for table in tables:
            conn.execute(f'VACUUM "{schema}"."{table}"')
            row = conn.execute("SELECT pg_total_relation_size(%s::regclass)",
                               (f'"{schema}"."{table}"',)).fetchone()
            total += int(row[0]) if row else 0
        return total


def _sqlite_size(path: Path) -> int:
    import sqlite3

    if not path.exists():
        return 0
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path.stat().st_size


def measure(kind: str, jobs: int, redis_url: str) -> float:
    """Bytes the store grew by per waiting job."""
    run = f"mem-{kind}-{uuid.uuid4().hex[:8]}"
    schema = pg_schema(run)
    sqlite_file = Path(tempfile.gettempdir()) / f"{run}.db"
    if kind == "plus-pg":
        _publish(kind, run, 1, redis_url)  # the schema and its tables exist before counting
        before = _pg_size(schema)
    elif kind == "plus-sqlite":
        _publish(kind, run, 1, redis_url)
        before = _sqlite_size(sqlite_file)
    else:
        _publish(kind, run, 1, redis_url)
        before = _redis_used(redis_url)
    try:
        _publish(kind, run, jobs, redis_url)
        if kind == "plus-pg":
            after = _pg_size(schema)
        elif kind == "plus-sqlite":
            after = _sqlite_size(sqlite_file)
        else:
            after = _redis_used(redis_url)
    finally:
        _cleanup(kind, run, redis_url, schema, sqlite_file)
    return (after - before) / jobs


def _cleanup(kind: str, run: str, redis_url: str, schema: str, sqlite_file: Path) -> None:
    if kind == "plus-pg":
        import psycopg

        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    for path in sqlite_file.parent.glob(f"{sqlite_file.name}*"):
        path.unlink()
    client = redis.Redis.from_url(redis_url)
    client.flushdb()  # the run's private server
    client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--configs", default=",".join(CONFIGS),
                        help="the configurations to measure (plain Celery's always is)")
    args = parser.parse_args()
    kinds = ["celery", *(k for k in args.configs.split(",") if k != "celery")]
    figures: dict[str, float] = {}
    with private_redis() as url:
        for kind in kinds:
            figures[kind] = measure(kind, args.jobs, url)
    base = figures["celery"]
    print(f"{args.jobs} waiting noop.delay(i, n) jobs, no worker; store growth per job")
    print(f"{'configuration':40} {'bytes/job':>10} {'vs plain Celery':>16}")
    for kind in kinds:
        print(f"{CONFIGS[kind]:40} {figures[kind]:10.0f} {figures[kind] / base:15.2f}x")


if __name__ == "__main__":
    main()
