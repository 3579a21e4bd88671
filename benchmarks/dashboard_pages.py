"""Dashboard list pages over 100,000 dead letters, on every store (SQLite, Redis, PostgreSQL).

Issue 5, acceptance 4: the web dashboard's list pages answer in under 200 ms with 100,000 dead
letters stored. For each store: one real dead letter is made through the store (published by
``send_task``, claimed, settled as failed with its error) and copied in bulk into ``--jobs``
records with distinct ids and finish times, a quarter of them on queue ``mail`` (SQLite: one
``INSERT ... SELECT`` over a recursive sequence; PostgreSQL: one ``INSERT ... SELECT`` over
``generate_series``; Redis: a Lua script copying the record server-side, 10,000 per call).
Then a real dashboard server (wsgiref, a thread on 127.0.0.1) answers the first, a middle and
the last page of ``/failed``, a queue-filtered page, a task-filtered page, two text searches
(the dashboard's: the newest 1,000 candidates; one matching all, one matching none), and (for
comparison) the overview and ``/metrics``; each is fetched ``--rounds`` times over HTTP and
the median and worst milliseconds are printed.

Each store is isolated and removed afterwards: a temporary SQLite file, a fresh Redis key
prefix, a fresh PostgreSQL schema of the test database.

    python -m benchmarks.dashboard_pages [--stores sqlite,redis,postgres] [--jobs 100000]
                                         [--rounds 7] [--no-vacuum]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sqlite3
import statistics
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from celery_plus import Celery
from celery_plus.admin import connect
from celery_plus.admin.web import make_app
from celery_plus.model.capped import CAPPED, COUNT_CAP
from celery_plus.model.store import Backend, Settle

TARGET_MS = 200.0
REDIS_URL = os.environ.get("PLUS_TEST_REDIS", "redis://127.0.0.1:6379/0")
PG_URL = os.environ.get("PLUS_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
TASK = "proj.send_invoice"
#: Whether the PostgreSQL store is vacuumed after the bulk insert (``--no-vacuum``: not).
VACUUM = True

#: Whether the Redis copies are in the admin's listing index of dead letters, as this
#: release's dead_letter (lib.lua) puts them when they die (``--unindexed``: as an earlier
#: release left them, without).
INDEXED = True

#: Copies the template record ARGV[2] into jobs bench-<ARGV[3]> .. bench-<ARGV[4]>, each
#: finished 10 ms earlier than the one before, every 4th on queue 'mail', all indexed in
#: P:dead (the record layout of stores/redis/lua/lib.lua) and, if ARGV[5] is '1', in the
#: admin's listing index (P:ax:dead:q:{queue}, P:ax:dead:t:{task}, P:ax:dead:qs).
_REDIS_COPY = """
local P, template = ARGV[1], ARGV[2]
local fields = redis.call('HGETALL', P .. ':job:' .. template)
local fin = tonumber(redis.call('HGET', P .. ':job:' .. template, 'fin'))
local name = redis.call('HGET', P .. ':job:' .. template, 'name')
local queue = redis.call('HGET', P .. ':job:' .. template, 'q')
for n = tonumber(ARGV[3]), tonumber(ARGV[4]) do
  local id = string.format('bench-%07d', n)
  local key = P .. ':job:' .. id
  redis.call('HSET', key, unpack(fields))
  local at = fin - n * 10
  redis.call('HSET', key, 'fin', at)
  local q = queue
  if n % 4 == 0 then redis.call('HSET', key, 'q', 'mail'); q = 'mail' end
  redis.call('ZADD', P .. ':dead', at, id)
  if ARGV[5] == '1' then
    redis.call('ZADD', P .. ':ax:dead:q:' .. q, at, id)
    redis.call('ZADD', P .. ':ax:dead:t:' .. name, at, id)
    redis.call('SADD', P .. ':ax:dead:qs', q)
  end
end
redis.call('SADD', P .. ':queues', 'mail')
return 1
"""


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def template_dead_letter(app: Celery) -> str:
    """One real dead letter in ``app``'s store; its task id."""
    with connect(app) as admin:
        backend: Backend = admin.store.backend  # type: ignore[attr-defined]
        job_id = str(app.send_task(TASK, args=[42], queue="celery").id)
        [claim] = backend.claim(["celery"], "bench-worker", 1).claims
        backend.settle([Settle(job_id, claim.token, "fail", {
            "reason": "task failed", "exc_type": "ConnectionError",
            "exc_message": "SMTP server unreachable",
            "traceback": "Traceback (most recent call last):\nConnectionError: SMTP unreachable"})])
    return job_id


# -- one isolated store per kind, filled in bulk ---------------------------------------------
@contextlib.contextmanager
def sqlite_store(jobs: int) -> Iterator[Celery]:
    with tempfile.TemporaryDirectory(prefix="dashboard-bench-") as tmp:
        path = Path(tmp) / "store.db"
        app = Celery("bench", broker=f"plus+sqlite:///{path}", set_as_current=False)
        template = template_dead_letter(app)
        with sqlite3.connect(path) as conn:
            columns = [row[1] for row in conn.execute("PRAGMA table_info(jobs)")]
            exprs = {"id": "printf('bench-%07d', n)", "finished_ms": "finished_ms - n * 10",
                     "queue": "CASE n % 4 WHEN 0 THEN 'mail' ELSE queue END"}
            select = ", ".join(exprs.get(c, c) for c in columns)
            conn.execute(
                f"WITH RECURSIVE seq(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM seq "
                f"WHERE n < ?) INSERT INTO jobs ({', '.join(columns)}) "
                f"SELECT {select} FROM jobs, seq WHERE jobs.id = ?", (jobs - 1, template))
            conn.execute("UPDATE meta SET value = ? WHERE key = 'stats:dead_lettered'", (jobs,))
        try:
            yield app
        finally:
            app.close()


@contextlib.contextmanager
def redis_store(jobs: int) -> Iterator[Celery]:
    import redis

    prefix = f"bench{uuid.uuid4().hex[:8]}"
    app = Celery("bench", broker=f"plus+{REDIS_URL}", set_as_current=False)
    app.conf.plus_key_prefix = prefix
    client = redis.Redis.from_url(REDIS_URL)
    try:
        template = template_dead_letter(app)
        copy = client.register_script(_REDIS_COPY)
        for start in range(1, jobs, 10_000):
            copy(args=[prefix, template, start, min(start + 9_999, jobs - 1), int(INDEXED)])
        if not INDEXED:  # the template too: no index at all
            client.delete(*client.keys(f"{prefix}:ax:*"))
        client.hset(f"{prefix}:stats", "dead_lettered", jobs)
        yield app
    finally:
        app.close()
        keys = list(client.scan_iter(f"{prefix}:*", count=5000))
        for i in range(0, len(keys), 5000):
            client.delete(*keys[i:i + 5000])
        client.close()


@contextlib.contextmanager
def postgres_store(jobs: int) -> Iterator[Celery]:
    import psycopg

    schema = f"bench{uuid.uuid4().hex[:8]}"
    app = Celery("bench", broker=f"plus+{PG_URL}", set_as_current=False)
    app.conf.plus_pg_schema = schema
    try:
        template = template_dead_letter(app)
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'SET search_path TO "{schema}"')
            columns = [row[0] for row in conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = %s "
                "AND table_name = 'jobs' ORDER BY ordinal_position", [schema])]
            exprs = {"id": "'bench-' || lpad(n::text, 7, '0')",
                     "finished_ms": "finished_ms - n * 10",
                     "queue": "CASE WHEN n %% 4 = 0 THEN 'mail' ELSE queue END"}
            select = ", ".join(exprs.get(c, c) for c in columns)
            conn.execute(f"INSERT INTO jobs ({', '.join(columns)}) SELECT {select} "
                         "FROM jobs, generate_series(1, %s) n WHERE jobs.id = %s",
                         [jobs - 1, template])
            conn.execute("INSERT INTO stats (name, n) VALUES ('dead_lettered', %s)", [jobs - 1])
            # What autovacuum does soon after a bulk insert (its insert threshold): statistics
            # and the visibility map, which lets counts use index-only scans. --no-vacuum
            # measures the store before that.
            conn.execute("VACUUM ANALYZE jobs" if VACUUM else "ANALYZE jobs")
        yield app
    finally:
        app.close()
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


STORES: dict[str, Callable[[int], contextlib.AbstractContextManager[Celery]]] = {
    "sqlite": sqlite_store, "redis": redis_store, "postgres": postgres_store}


# -- timing ----------------------------------------------------------------------------------
def timed(url: str, rounds: int) -> list[float]:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        with urllib.request.urlopen(url, timeout=120) as response:
            response.read()
            assert response.status == 200, (url, response.status)
        times.append((time.perf_counter() - started) * 1000)
    return times


def measure(kind: str, jobs: int, rounds: int) -> list[tuple[str, float, float, bool]]:
    """(page, median ms, worst ms, is a list page) for each page, on a filled ``kind`` store."""
    started = time.perf_counter()
    with STORES[kind](jobs) as app:
        with connect(app) as admin:
            count = admin.counts().failed
        # The SQL stores count up to COUNT_CAP (docs/admin.md "Cost"): more reads CAPPED.
        assert count == (CAPPED if jobs > COUNT_CAP and kind != "redis" else jobs), (
            f"{kind}: {count} dead letters, expected {jobs}")
        print(f"{kind}: {jobs} dead letters stored in {time.perf_counter() - started:.1f} s "
              "(page, median ms, worst ms)", flush=True)
        web = make_app(app)
        server = make_server("127.0.0.1", 0, web, handler_class=_Quiet)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        base = f"http://127.0.0.1:{server.server_port}"
        last = (jobs + 49) // 50
        pages = [("/failed?page=1", True), (f"/failed?page={last // 2}", True),
                 (f"/failed?page={last}", True), ("/failed?page=1&queue=mail", True),
                 (f"/failed?page=1&task={TASK}", True), ("/failed?page=1&text=SMTP", True),
                 ("/failed?page=1&text=no-such-text", True), ("/", False),
                 ("/metrics", False)]
        out = []
        try:
            timed(base + "/failed?page=1", 1)  # warm-up: connection, caches
            for page, listing in pages:
                times = timed(base + page, rounds)
                out.append((page, statistics.median(times), max(times), listing))
                print(f"  {page:40} {out[-1][1]:10.1f} {out[-1][2]:10.1f}", flush=True)
        finally:
            server.shutdown()
            server.server_close()
            web.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stores", default="sqlite,redis,postgres",
                        help="comma-separated: sqlite, redis, postgres")
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--no-vacuum", action="store_true",
                        help="PostgreSQL: measure before VACUUM (ANALYZE only)")
    args = parser.parse_args()
    global VACUUM
    VACUUM = not args.no_vacuum
    kinds = [k.strip() for k in args.stores.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in STORES]
    if unknown:
        parser.error(f"--stores: unknown {', '.join(unknown)} (use {', '.join(STORES)})")
    results = {kind: measure(kind, args.jobs, args.rounds) for kind in kinds}
    print(f"\n{'store':9} {'page':40} {'median ms':>10} {'worst ms':>10}")
    slow = []
    for kind, rows in results.items():
        for page, median, worst, listing in rows:
            print(f"{kind:9} {page:40} {median:10.1f} {worst:10.1f}")
            if listing and median >= TARGET_MS:
                slow.append(f"{kind} {page}")
    verdict = f"over {TARGET_MS:.0f} ms: {', '.join(slow)}" if slow else "all under target"
    print(f"list pages (target < {TARGET_MS:.0f} ms median): {verdict}")


if __name__ == "__main__":
    main()
