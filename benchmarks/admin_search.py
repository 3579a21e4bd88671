"""Admin search at 1,000,000 waiting jobs and 100,000 dead letters, on every store (issue #28).

For each store (``sqlite``: a file in the temp folder; ``redis``: a fresh key prefix of the test
Redis; ``postgres``: a fresh schema of the test database), filled fast:

1. ``--dead`` dead letters: one real dead letter (``send_task``, claimed, settled as failed)
   copied in bulk (``benchmarks/dashboard_pages.py``'s fills);
2. ``--waiting`` enqueued jobs: one real ``send_task`` message of ``billing.send_invoice``
   copied with ids and scores of their own (SQLite, PostgreSQL: one ``INSERT ... SELECT``;
   Redis: a Lua script copying the record server-side, 10,000 per call);
3. then, through the Python API (the CLI and the dashboard call the same), each search is
   timed once right after the fill (*first*: cold caches) and ``--rounds`` times more
   (*steady*: the median): an id (a job in the middle of the backlog), a part of a task
   name, and a text search in the dashboard's and the CLI's scan window (the newest 1,000
   candidates; one text matching every candidate, one matching none), in ``enqueued`` and
   ``failed``; then the listing a matched task name links to (``task=``), and a text search
   in it; a rare task's listing (RARE_JOBS jobs published before the million), pages of
   the waiting and dead listings, and the other reads an operator's pages make (counts,
   status, error groups, a group's page, the task breakdown).

Every figure is printed in ms, with whether it is under ``TARGET_MS``. Each store is removed
afterwards.

    python -m benchmarks.admin_search [--stores sqlite,redis,postgres] [--waiting 1000000]
                                      [--dead 100000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import contextlib
import sqlite3
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any

from celery_plus import Celery
from celery_plus.admin import Admin, connect
from celery_plus.admin.cuts import WALK_WINDOW
from celery_plus.admin.search import TEXT_WINDOW
from celery_plus.model.capped import count_text

from . import dashboard_pages as filled
from .memory import private_redis

TARGET_MS = 1000.0
WAITING_TASK = "billing.send_invoice"
#: A task with RARE_JOBS waiting jobs, published before the million.
RARE_TASK = "billing.refund"
RARE_JOBS = 10
#: Copies of the waiting template per statement / publish batch.
BATCH = 100_000


def _waiting_template(app: Celery) -> str:
    for n in range(RARE_JOBS):  # a task with few jobs among the million: its listing walks
        app.send_task(RARE_TASK, args=[f"refund-{n}"], queue="celery")
    return str(app.send_task(WAITING_TASK, args=["invoice-0"], kwargs={"customer": "acme"},
                             queue="celery").id)


def _fill_sqlite(app: Celery, count: int) -> str:
    template = _waiting_template(app)
    path = str(app.conf.broker_url).split("plus+sqlite:///", 1)[1]
    with sqlite3.connect(path) as conn:
        columns = [row[1] for row in conn.execute("PRAGMA table_info(jobs)")]
        exprs = {"id": "printf('wait-%07d', n)", "score": "score + n",
                 "enqueued_ms": "enqueued_ms - ? + n"}
        select = ", ".join(exprs.get(c, c) for c in columns)
        conn.execute(
            f"WITH RECURSIVE seq(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM seq "
            f"WHERE n < ?) INSERT INTO jobs ({', '.join(columns)}) "
            f"SELECT {select} FROM jobs, seq WHERE jobs.id = ?", (count - 1, count, template))
    return f"wait-{count // 2:07d}"


def _fill_postgres(app: Celery, count: int) -> str:
    import psycopg

    template = _waiting_template(app)
    schema = str(app.conf.plus_pg_schema)
    with psycopg.connect(filled.PG_URL, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{schema}"')
        columns = [row[0] for row in conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = %s "
            "AND table_name = 'jobs' ORDER BY ordinal_position", [schema])]
        exprs = {"id": "'wait-' || lpad(n::text, 7, '0')", "score": "score + n",
                 "enqueued_ms": f"enqueued_ms - {count} + n"}
        select = ", ".join(exprs.get(c, c) for c in columns)
        for start in range(1, count, BATCH):
            conn.execute(f"INSERT INTO jobs ({', '.join(columns)}) SELECT {select} "
                         "FROM jobs, generate_series(%s::bigint, %s::bigint) n "
                         "WHERE jobs.id = %s", [start, min(start + BATCH, count) - 1, template])
        conn.execute("VACUUM ANALYZE jobs")
    return f"wait-{count // 2:07d}"


#: Copies the waiting template ARGV[2] (its hash fields and its stored envelope) into jobs
#: wait-<ARGV[3]> .. wait-<ARGV[4]> of queue "celery", each scored (and enqueued) one later
#: than the one before, as publish.lua would have stored them (stores/redis/lua/lib.lua's
#: layout: P:job:{id}, P:m:{id}, P:q:{queue}).
_REDIS_COPY = """
local P, template = ARGV[1], ARGV[2]
local job = P .. ':job:' .. template
local fields = redis.call('HGETALL', job)
local msg = redis.call('GET', P .. ':m:' .. template)
local score = tonumber(redis.call('ZSCORE', P .. ':q:celery', template))
local enq = tonumber(redis.call('HGET', job, 'enq'))
local has_score = redis.call('HEXISTS', job, 'score') == 1
for n = tonumber(ARGV[3]), tonumber(ARGV[4]) do
  local id = string.format('wait-%07d', n)
  local key = P .. ':job:' .. id
  redis.call('HSET', key, unpack(fields))
  redis.call('HSET', key, 'enq', enq + n)
  if has_score then redis.call('HSET', key, 'score', score + n) end
  if msg then redis.call('SET', P .. ':m:' .. id, msg) end
  redis.call('ZADD', P .. ':q:celery', score + n, id)
end
return 1
"""


def _fill_redis(app: Celery, count: int) -> str:
    import redis

    template = _waiting_template(app)
    client = redis.Redis.from_url(filled.REDIS_URL)
    try:
        copy = client.register_script(_REDIS_COPY)
        prefix = str(app.conf.plus_key_prefix)
        for start in range(1, count, 10_000):
            copy(args=[prefix, template, start, min(start + 9_999, count - 1)])
    finally:
        client.close()
    return f"wait-{count // 2:07d}"


FILLS: dict[str, Callable[[Celery, int], str]] = {
    "sqlite": _fill_sqlite, "postgres": _fill_postgres, "redis": _fill_redis}


@contextlib.contextmanager
def store(kind: str, waiting: int, dead: int) -> Iterator[tuple[Celery, str, str]]:
    """(app, the id of a waiting job in the middle, the id of a dead letter) of a filled store
    (Redis: a redis-server of the run's own, so a million jobs do not weigh on a shared one)."""
    with contextlib.ExitStack() as stack:
        if kind == "redis":
            filled.REDIS_URL = stack.enter_context(private_redis())
        app = stack.enter_context(filled.STORES[kind](dead))
        middle = FILLS[kind](app, waiting)
        yield app, middle, f"bench-{dead // 2:07d}"


def searches(middle: str, dead_id: str) -> list[tuple[str, str, dict[str, Any]]]:
    """(label, state, jobs() arguments) of each search timed."""
    window = {"text_limit": TEXT_WINDOW}
    walk = {"walk_limit": WALK_WINDOW}  # the dashboard's and the CLI's (admin/cuts.py)
    return [
        ("id (waiting)", "enqueued", {"text": middle}),
        ("id (dead letter)", "failed", {"text": dead_id}),
        ("task-name part (waiting)", "enqueued", {"text": "SEND_INV", **window}),
        ("task-name part (dead)", "failed", {"text": "send_inv", **window}),
        ("text, all match (waiting)", "enqueued", {"text": "acme", **window}),
        ("text, none match (waiting)", "enqueued", {"text": "no-such-text", **window}),
        ("text, all match (dead)", "failed", {"text": "SMTP", **window}),
        ("text, none match (dead)", "failed", {"text": "no-such-text", **window}),
        ("listing of a matched task (waiting)", "enqueued", {"task": WAITING_TASK, **walk}),
        ("listing of a matched task (dead)", "failed", {"task": filled.TASK, **walk}),
        ("listing of a queue (dead)", "failed", {"queue": "mail", **walk}),
        ("text in a task's listing (waiting)", "enqueued",
         {"task": WAITING_TASK, "text": "no-such-text", **window, **walk}),
        ("listing of a rare task (waiting)", "enqueued", {"task": RARE_TASK, **walk}),
        ("text in a rare task's listing (waiting)", "enqueued",
         {"task": RARE_TASK, "text": "refund-3", **window, **walk}),
        ("waiting, page 1", "enqueued", {}),
        ("waiting, page 1,000", "enqueued", {"page": 1000}),
        ("waiting, last hour (time filter)", "enqueued", {"since": 3600.0, **walk}),
        ("dead letters, page 1", "failed", {}),
        ("dead letters, page 2,000 (the last)", "failed", {"page": 2000}),
    ]


def operator_calls(admin: Admin) -> list[tuple[str, Callable[[], Any]]]:
    """(label, call) of the other reads an operator's pages make (the dashboard's overview,
    status and /metrics read counts and status; /errors the groups; /tasks the breakdown)."""
    return [
        ("counts (overview, /metrics)", admin.counts),
        ("status (overview, store-status)", admin.status),
        ("error groups (/errors)", admin.error_groups),
        ("a group's dead letters, page 1", lambda: admin.error_group_jobs(
            "ConnectionError", "SMTP server unreachable")),
        ("task breakdown (/tasks)", admin.task_breakdown),
    ]


def _rows(result: Any) -> int:
    for name in ("items", "groups", "tasks", "queues"):
        if hasattr(result, name):
            return len(getattr(result, name))
    return 1


def timed_call(call: Callable[[], Any]) -> tuple[float, int]:
    started = time.perf_counter()
    result = call()
    return (time.perf_counter() - started) * 1000, _rows(result)


def timed(admin: Admin, state: str, kwargs: dict[str, Any]) -> tuple[float, int]:
    args = dict(kwargs)
    if "since" in args:  # seconds ago, as the dashboard's "last hour"
        args["since"] = time.time() - args["since"]
    return timed_call(lambda: admin.jobs(state, **args))


def measure(kind: str, waiting: int, dead: int, rounds: int
            ) -> list[tuple[str, float, float, int]]:
    started = time.perf_counter()
    with store(kind, waiting, dead) as (app, middle, dead_id), connect(app) as admin:
        counts = admin.counts()
        print(f"{kind}: {waiting:,} waiting and {dead:,} dead letters stored in "
              f"{time.perf_counter() - started:.1f} s (counts: {count_text(counts.enqueued)} / "
              f"{count_text(counts.failed)}); search, first ms, steady median ms, rows",
              flush=True)
        calls: list[tuple[str, Callable[[], Any]]] = [
            (label, lambda s=state, k=kwargs: timed(admin, s, k))
            for label, state, kwargs in searches(middle, dead_id)]
        calls += [(label, lambda c=call: timed_call(c)) for label, call in operator_calls(admin)]
        out = []
        for label, run in calls:
            first, rows = run()
            steady = statistics.median(run()[0] for _ in range(rounds))
            out.append((label, first, steady, rows))
            print(f"  {label:36} {first:9.1f} {steady:9.1f} {rows:6}", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stores", default="sqlite,redis,postgres",
                        help="comma-separated: sqlite, redis, postgres")
    parser.add_argument("--waiting", type=int, default=1_000_000)
    parser.add_argument("--dead", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--unindexed", action="store_true",
                        help="Redis: the dead letters without the admin's listing index, as "
                             "an earlier release stored them")
    args = parser.parse_args()
    filled.INDEXED = not args.unindexed
    kinds = [k.strip() for k in args.stores.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in FILLS]
    if unknown:
        parser.error(f"--stores: unknown {', '.join(unknown)} (use {', '.join(FILLS)})")
    slow = []
    for kind in kinds:
        for label, first, steady, _ in measure(kind, args.waiting, args.dead, args.rounds):
            if max(first, steady) >= TARGET_MS:
                slow.append(f"{kind} {label}")
    verdict = f"over {TARGET_MS:.0f} ms: {', '.join(slow)}" if slow else "all under target"
    print(f"searches (target < {TARGET_MS:.0f} ms, first and steady): {verdict}")


if __name__ == "__main__":
    main()
