"""The admin's text search over a million waiting jobs and 100,000 dead letters, per store.

Issue #28: a search by task id, by part of a task name, by an argument and by error text must
answer in well under a second with ``--waiting`` (1,000,000) jobs waiting and ``--dead``
(100,000) dead letters, on every store. For each store (``sqlite``: a temporary file;
``postgres``: a fresh schema of the test database; ``redis``: a private ``redis-server``):

1. *fill*: the dead letters as ``benchmarks/dashboard_pages.py`` makes them (one real dead
   letter copied in bulk: ids ``bench-NNNNNNN``, error ``SMTP server unreachable``); then the
   waiting jobs, copies of one real envelope sent by ``send_task`` with ``args=["cust-…"]``,
   each with an id, a customer number (in its ``argsrepr``), an enqueue time and a task name
   of its own (``proj.task_00`` … ``proj.task_19``; every 10,000th ``proj.rare_report``):
   SQLite and PostgreSQL by ``INSERT … SELECT`` in batches of 100,000 (the search index's
   triggers fire for every row, as for a publish), Redis by ``publish_many`` 1,000 at a time;
2. *search*: each search of :data:`SEARCHES` through the Python API (what the CLI and the
   dashboard call), page 1 of 50, ``--rounds`` times: median and worst ms. A store whose index
   answers searches every job; one without (Redis) searches the newest ``SEARCH_WINDOW``
   candidates (the CLI's and the dashboard's window), and the table says so.

    python -m benchmarks.admin_search [--stores sqlite,postgres,redis] [--waiting 1000000]
                                      [--dead 100000] [--rounds 5]
    python -m benchmarks.admin_search --publish-cost 2000 [--stores sqlite,postgres]

``--publish-cost N`` measures instead what the index costs a publish: ``N`` single
``publish`` calls on a fresh store with the index, in turn with ``N`` on one whose triggers
were dropped (p50 / p99 ms).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg

from celery_plus import Celery
from celery_plus.admin import connect
from celery_plus.admin.api import Admin
from celery_plus.model.admin import SEARCH_WINDOW
from celery_plus.model.options import StoreOptions
from celery_plus.model.store import Backend, NewJob
from celery_plus.stores.postgres.backend import PostgresBackend
from celery_plus.stores.sqlite.backend import SQLiteBackend

from . import dashboard_pages
from .memory import private_redis

QUEUE = "celery"
BATCH = 100_000
#: (label, state, text): what an operator types.
SEARCHES = (
    ("waiting: a whole task id", "enqueued", "wait-0500000"),
    ("waiting: part of a task id", "enqueued", "0777777"),
    ("waiting: part of a rare task name (100)", "enqueued", "rare_rep"),
    ("waiting: part of a common task name (5%)", "enqueued", "task_07"),
    ("waiting: an argument (1 job)", "enqueued", "cust-0654321"),
    ("waiting: text matching none", "enqueued", "no-such-text"),
    ("dead: a whole task id", "failed", "bench-0042424"),
    ("dead: error text (all match)", "failed", "smtp server"),
    ("dead: error text matching none", "failed", "no-such-error"),
)


def _template(app: Celery) -> str:
    """One real waiting job (``args=["cust-TEMPLATE"]``): its id."""
    return str(app.send_task("proj.task_00", args=["cust-TEMPLATE"], queue=QUEUE).id)


def _fill_sqlite(path: Path, template: str, waiting: int) -> None:
    with contextlib.closing(sqlite3.connect(path)) as conn:
        columns = [row[1] for row in conn.execute("PRAGMA table_info(jobs)")]
        exprs = {
            "id": "printf('wait-%07d', n)",
            "name": "CASE WHEN n % 10000 = 0 THEN 'proj.rare_report' "
                    "ELSE printf('proj.task_%02d', n % 20) END",
            "msg": f"CAST(replace(replace(CAST(msg AS TEXT), '{template}', "
                   "printf('wait-%07d', n)), 'TEMPLATE', printf('%07d', n)) AS BLOB)",
            "score": "score + n", "enqueued_ms": "enqueued_ms - n"}
        select = ", ".join(exprs.get(c, c) for c in columns)
        for start in range(1, waiting + 1, BATCH):
            stop = min(start + BATCH - 1, waiting)
            with conn:
                conn.execute(
                    f"WITH RECURSIVE seq(n) AS (SELECT ? UNION ALL SELECT n + 1 FROM seq "
                    f"WHERE n < ?) INSERT INTO jobs ({', '.join(columns)}) "
                    f"SELECT {select} FROM jobs, seq WHERE jobs.id = ?", (start, stop, template))
            print(f"    {stop:,} waiting", flush=True)
        with conn:
            conn.execute("DELETE FROM jobs WHERE id = ?", (template,))


def _fill_postgres(schema: str, template: str, waiting: int) -> None:
    with psycopg.connect(dashboard_pages.PG_URL, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{schema}"')
        columns = [row[0] for row in conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = %s "
            "AND table_name = 'jobs' ORDER BY ordinal_position", [schema])]
        exprs = {
            "id": "'wait-' || lpad(n::text, 7, '0')",
            "name": "CASE WHEN n %% 10000 = 0 THEN 'proj.rare_report' "
                    "ELSE 'proj.task_' || lpad((n %% 20)::text, 2, '0') END",
            "msg": "convert_to(replace(replace(convert_from(msg, 'UTF8'), id, "
                   "'wait-' || lpad(n::text, 7, '0')), 'TEMPLATE', lpad(n::text, 7, '0')), "
                   "'UTF8')",
            "score": "score + n", "enqueued_ms": "enqueued_ms - n"}
        select = ", ".join(exprs.get(c, c) for c in columns)
        for start in range(1, waiting + 1, BATCH):
            stop = min(start + BATCH - 1, waiting)
            conn.execute(f"INSERT INTO jobs ({', '.join(columns)}) SELECT {select} "
                         "FROM jobs, generate_series(%s::bigint, %s::bigint) n WHERE jobs.id = %s",
                         [start, stop, template])
            print(f"    {stop:,} waiting", flush=True)
        conn.execute("DELETE FROM jobs WHERE id = %s", [template])
        conn.execute("VACUUM ANALYZE jobs")
        conn.execute("VACUUM ANALYZE job_search")


def _fill_redis(backend: Backend, template: str, waiting: int) -> None:
    raw = backend.raw_message(template)
    assert raw is not None
    text = raw.decode()
    for start in range(1, waiting + 1, 1_000):
        jobs = []
        for n in range(start, min(start + 1_000, waiting + 1)):
            job_id = f"wait-{n:07d}"
            name = "proj.rare_report" if n % 10_000 == 0 else f"proj.task_{n % 20:02d}"
            jobs.append(NewJob(id=job_id, queue=QUEUE, name=name, message=text.replace(
                template, job_id).replace("TEMPLATE", f"{n:07d}")))
        backend.publish_many(jobs)
        if start % BATCH == 1 and start > 1:
            print(f"    {start - 1:,} waiting", flush=True)


@contextlib.contextmanager
def filled(kind: str, waiting: int, dead: int) -> Iterator[Celery]:
    """A store of ``kind`` with ``dead`` dead letters and ``waiting`` waiting jobs."""
    with contextlib.ExitStack() as stack:
        if kind == "redis":
            dashboard_pages.REDIS_URL = stack.enter_context(private_redis())
        app = stack.enter_context(dashboard_pages.STORES[kind](dead))
        template = _template(app)
        admin = stack.enter_context(connect(app))
        backend: Backend = admin.store.backend  # type: ignore[attr-defined]
        if kind == "sqlite":
            path = Path(str(app.conf.broker_url).split("sqlite://", 1)[1])
            _fill_sqlite(path, template, waiting)
        elif kind == "postgres":
            _fill_postgres(app.conf.plus_pg_schema, template, waiting)
        else:
            _fill_redis(backend, template, waiting)
        yield app


def _search_ms(admin: Admin, state: str, text: str, rounds: int
               ) -> tuple[float, float, int, str]:
    """(median ms, worst ms, total, searched) of page 1 of a search, as the CLI runs it."""
    indexed = admin.text_indexed(state, text)
    limit = None if indexed else SEARCH_WINDOW
    times, page = [], None
    for _ in range(rounds):
        started = time.perf_counter()
        page = admin.jobs(state, text=text, text_limit=limit)
        times.append((time.perf_counter() - started) * 1000)
    assert page is not None
    scope = ("all (index)" if indexed else
             f"newest {page.searched:,}" if page.searched is not None else "all (read)")
    return statistics.median(times), max(times), page.total, scope


def measure(kind: str, waiting: int, dead: int, rounds: int) -> list[tuple[str, ...]]:
    started = time.perf_counter()
    print(f"{kind}: filling {waiting:,} waiting jobs and {dead:,} dead letters", flush=True)
    with filled(kind, waiting, dead) as app, connect(app) as admin:
        counts = admin.counts()
        print(f"{kind}: filled in {time.perf_counter() - started:.0f} s "
              f"(enqueued {counts.enqueued:,}, failed {counts.failed:,}; counts capped at "
              "10,000 on the SQL stores)", flush=True)
        rows: list[tuple[str, ...]] = []
        for label, state, text in SEARCHES:
            median, worst, total, scope = _search_ms(admin, state, text, rounds)
            rows.append((kind, label, f"{median:.1f}", f"{worst:.1f}", f"{total:,}", scope))
            print("  " + "  ".join(rows[-1][1:]), flush=True)
    return rows


@contextlib.contextmanager
def _bare_store(kind: str, indexed: bool) -> Iterator[Backend]:
    """A fresh store of ``kind``; without the search index's triggers unless ``indexed``."""
    if kind == "sqlite":
        with tempfile.TemporaryDirectory(prefix="search-cost-") as tmp:
            path = Path(tmp) / "store.db"
            backend: Backend = SQLiteBackend(f"sqlite:///{path}", StoreOptions())
            backend.size(QUEUE)  # creates the schema
            if not indexed:
                with contextlib.closing(sqlite3.connect(path)) as conn, conn:
                    for trigger in ("insert", "update", "delete"):
                        conn.execute(f"DROP TRIGGER jobs_search_{trigger}")
            try:
                yield backend
            finally:
                backend.close()
        return
    schema = f"searchcost{uuid.uuid4().hex[:8]}"
    backend = PostgresBackend(dashboard_pages.PG_URL, schema=schema)
    backend.size(QUEUE)
    try:
        if not indexed:
            with psycopg.connect(dashboard_pages.PG_URL, autocommit=True) as pg:
                for trigger in ("jobs_search", "jobs_search_update"):
                    pg.execute(f'DROP TRIGGER {trigger} ON "{schema}".jobs')
        yield backend
    finally:
        backend.close()
        with psycopg.connect(dashboard_pages.PG_URL, autocommit=True) as pg:
            pg.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def publish_cost(kind: str, count: int) -> tuple[str, ...]:
    """p50 / p99 ms of one ``publish`` (a ``delay()``'s store call) with the search index and
    without its triggers, ``count`` each, taken in turn on two fresh stores."""
    envelope = json.dumps({
        "body": "W1siY3VzdC0wMDAwMDAxIl0sIHt9LCB7fV0=", "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": {"task": "proj.task_00", "id": "ID", "argsrepr": "('cust-0000001',)",
                    "kwargsrepr": "{}"},
        "properties": {"body_encoding": "base64", "correlation_id": "ID"}})
    times: dict[bool, list[float]] = {True: [], False: []}
    with _bare_store(kind, True) as with_index, _bare_store(kind, False) as without:
        for n in range(count):
            for indexed, backend in ((True, with_index), (False, without)):
                job = NewJob(id=f"pub-{n:07d}", queue=QUEUE, name="proj.task_00",
                             message=envelope.replace("ID", f"pub-{n:07d}"))
                started = time.perf_counter()
                backend.publish(job)
                times[indexed].append((time.perf_counter() - started) * 1000)
    figures = []
    for indexed in (True, False):
        ordered = sorted(times[indexed])
        figures += [f"{statistics.median(ordered):.2f}",
                    f"{ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]:.2f}"]
    return (kind, *figures)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stores", default="sqlite,postgres,redis")
    parser.add_argument("--waiting", type=int, default=1_000_000)
    parser.add_argument("--dead", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--publish-cost", type=int, default=0, metavar="N",
                        help="instead: N publishes with and without the index (SQL stores)")
    args = parser.parse_args()
    if args.publish_cost:
        print("| store | publish p50 ms | p99 | without the index: p50 | p99 |")
        print("|---|---|---|---|---|")
        for kind in [k.strip() for k in args.stores.split(",") if k.strip() != "redis"]:
            print("| " + " | ".join(publish_cost(kind, args.publish_cost)) + " |", flush=True)
        return
    rows = []
    for kind in [k.strip() for k in args.stores.split(",") if k.strip()]:
        rows += measure(kind, args.waiting, args.dead, args.rounds)
    print("\n| store | search | median ms | worst ms | matches | searched |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    main()
