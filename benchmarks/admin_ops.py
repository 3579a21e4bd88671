"""The operator pages over 100,000 dead letters, on every store (SQLite, Redis, PostgreSQL).

Issue 28: errors grouped by type and message must not read every dead letter per page load.
Each store is filled as ``benchmarks/dashboard_pages.py`` fills it (one real dead letter copied
in bulk), then the copies' errors are varied: 20 messages (``SMTP server unreachable: mx<k>``,
``k = n % 20``), each followed by a second line that differs per job (``attempt <n>``, which the
grouping leaves out), and every 7th job a ``TimeoutError``. Then a real dashboard server answers
``/errors`` (the first load: on Redis it builds the admin's group index, read once) and again,
one group's page of dead letters, and ``/tasks`` (the per-task breakdown); each is fetched
``--rounds`` times over HTTP: median and worst milliseconds.

    python -m benchmarks.admin_ops [--stores sqlite,redis,postgres] [--jobs 100000] [--rounds 7]
    python -m benchmarks.admin_ops --actions --jobs 20000   # a group action, a text-filter one
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import threading
import time
from typing import Any
from urllib.parse import urlencode
from wsgiref.simple_server import make_server

from benchmarks import dashboard_pages as base
from celery_plus import Celery
from celery_plus.admin import connect
from celery_plus.admin.web import make_app

GROUPS = 20

_REDIS_VARY = """
local P = ARGV[1]
for n = tonumber(ARGV[2]), tonumber(ARGV[3]) do
  local key = P .. ':job:' .. string.format('bench-%07d', n)
  local etype = 'ConnectionError'
  if n % 7 == 0 then etype = 'TimeoutError' end
  redis.call('HSET', key, 'etype', etype,
             'emsg', 'SMTP server unreachable: mx' .. (n % 20) .. '\\nattempt ' .. n)
end
return 1
"""
_SQL_MESSAGE = "'SMTP server unreachable: mx' || (n % 20) || {nl} || 'attempt ' || n"


def vary(kind: str, app: Celery, jobs: int) -> None:
    """Give the bulk copies their varied errors (see the module docstring)."""
    if kind == "redis":
        import redis

        client = redis.Redis.from_url(base.REDIS_URL)
        script = client.register_script(_REDIS_VARY)
        for start in range(1, jobs, 10_000):
            script(args=[app.conf.plus_key_prefix, start, min(start + 9_999, jobs - 1)])
        client.close()
        return
    if kind == "sqlite":
        path = app.conf.broker_url.split("///", 1)[1]
        with sqlite3.connect(path) as conn:
            conn.execute(
                "UPDATE jobs SET exc_type = CASE WHEN n % 7 = 0 THEN 'TimeoutError' ELSE "
                "'ConnectionError' END, exc_message = " + _SQL_MESSAGE.format(nl="char(10)")
                .replace("n %", "s.n %").replace("|| n", "|| s.n") +
                " FROM (SELECT id AS jid, CAST(substr(id, 7) AS INTEGER) AS n FROM jobs "
                "WHERE id LIKE 'bench-%') AS s WHERE jobs.id = s.jid")
        return
    import psycopg

    with psycopg.connect(base.PG_URL, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{app.conf.plus_pg_schema}"')
        conn.execute(
            "UPDATE jobs SET exc_type = CASE WHEN s.n % 7 = 0 THEN 'TimeoutError' ELSE "
            "'ConnectionError' END, exc_message = 'SMTP server unreachable: mx' || (s.n % 20) "
            "|| E'\\n' || 'attempt ' || s.n FROM (SELECT id AS jid, substr(id, 7)::int AS n "
            "FROM jobs WHERE id LIKE 'bench-%') AS s WHERE jobs.id = s.jid")
        conn.execute("VACUUM ANALYZE jobs")


def measure(kind: str, jobs: int, rounds: int) -> list[tuple[str, float, float]]:
    started = time.perf_counter()
    with base.STORES[kind](jobs) as app:
        vary(kind, app, jobs)
        print(f"{kind}: {jobs} dead letters stored in {time.perf_counter() - started:.1f} s "
              "(page, median ms, worst ms)", flush=True)
        with connect(app) as admin:
            assert admin.counts().failed in (jobs, 10_001)  # (SQL counts are capped)
        web = make_app(app)
        server = make_server("127.0.0.1", 0, web, handler_class=base._Quiet)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        url = f"http://127.0.0.1:{server.server_port}"
        group = urlencode({"type": "ConnectionError", "message": "SMTP server unreachable: mx3"})
        out: list[tuple[str, float, float]] = []
        try:
            first = base.timed(url + "/errors", 1)[0]
            out.append(("/errors (first load)", first, first))
            print(f"  {out[-1][0]:40} {first:10.1f}", flush=True)
            with connect(app) as admin:
                found = admin.error_groups()
            print(f"  {found.total} groups; largest {found.groups[0].count}", flush=True)
            for page in ("/errors", f"/errors/jobs?{group}", f"/errors/jobs?{group}&page=50",
                         "/tasks"):
                times = base.timed(url + page, rounds)
                out.append((page, statistics.median(times), max(times)))
                print(f"  {page[:40]:40} {out[-1][1]:10.1f} {out[-1][2]:10.1f}", flush=True)
        finally:
            server.shutdown()
            server.server_close()
            web.close()
    return out


def measure_actions(kind: str, jobs: int) -> list[tuple[str, int, float]]:
    """(action, jobs changed, seconds) of a group action and a text-filter action."""
    out = []
    with base.STORES[kind](jobs) as app:
        vary(kind, app, jobs)
        with connect(app) as admin:
            started = time.perf_counter()
            done = admin.discard_group("ConnectionError", "SMTP server unreachable: mx3")
            out.append(("discard_group (ConnectionError, mx3)", len(done.changed),
                        time.perf_counter() - started))
            started = time.perf_counter()
            done = admin.act_on_filter("retry", "failed", text="unreachable: mx5\n")
            out.append(("act_on_filter retry, text 'unreachable: mx5\\n'", len(done.changed),
                        time.perf_counter() - started))
    for action, changed, seconds in out:
        print(f"{kind:9} {action:50} {changed:6} jobs {seconds:8.2f} s", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stores", default="sqlite,redis,postgres")
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--actions", action="store_true",
                        help="time a group action and a text-filter action instead")
    args = parser.parse_args()
    if args.actions:
        for kind in (k.strip() for k in args.stores.split(",") if k.strip()):
            measure_actions(kind, args.jobs)
        return
    results: dict[str, Any] = {}
    for kind in (k.strip() for k in args.stores.split(",") if k.strip()):
        results[kind] = measure(kind, args.jobs, args.rounds)
    print(f"\n{'store':9} {'page':40} {'median ms':>10} {'worst ms':>10}")
    for kind, rows in results.items():
        for page, median, worst in rows:
            print(f"{kind:9} {page[:40]:40} {median:10.1f} {worst:10.1f}")


if __name__ == "__main__":
    main()
