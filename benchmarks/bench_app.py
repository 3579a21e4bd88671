"""The benchmark's app: the same no-op task on plain Celery or on celery-plus.

``BENCH_KIND`` picks ``celery`` (plain Celery on ``redis://``), ``plus`` (celery-plus
on ``plus+redis://``), ``plus-sqlite`` (celery-plus on ``plus+sqlite://``, a file in
the system's temp folder) or ``plus-pg`` (celery-plus on ``plus+postgresql://``, a schema
of its own: :func:`pg_schema`; ``plus-pg-async`` the same with ``plus_pg_synchronous_commit``
off; ``plus-pg-p16`` the same with ``worker_prefetch_multiplier`` 16, claims of up to 16
jobs ahead); ``BENCH_RUN`` isolates each run's queue, keys, file and schema. The
first and the last job write their wall-clock time to Redis, which gives the drain rate.

``counted`` (optionally sleeping, for the I/O-bound pool rows) counts completions instead, so
the rate holds for pools that run many jobs at once; ``timed`` writes when its body returns,
for the ack-latency rows (``benchmarks/pools.py``); ``returned`` records its first return
and counts its runs, for the kill -9 window (``benchmarks/kill_window.py``). Plain Celery's
keys carry the run's prefix (``global_keyprefix``), so its unacked hash is the run's own.
"""

from __future__ import annotations

import os
import tempfile
import time

import redis

from .marks import count_done

REDIS_URL = os.environ.get("BENCH_REDIS", "redis://127.0.0.1:6379/0")
PG_URL = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")
KIND = os.environ.get("BENCH_KIND", "celery")
RUN = os.environ.get("BENCH_RUN", "bench")
QUEUE = f"{RUN}-q"


def pg_schema(run: str) -> str:
    """The plus_pg_schema of a run (a lower-case SQL identifier)."""
    return "".join(c if c.isalnum() else "_" for c in run.lower())[:48]


if KIND.startswith("plus"):
    from celery_plus import Celery

    if KIND == "plus-sqlite":
        broker = f"plus+sqlite:///{tempfile.gettempdir()}/{RUN}.db"
    elif KIND.startswith("plus-pg"):
        broker = f"plus+{PG_URL}"
    else:
        broker = f"plus+{REDIS_URL}"
    app = Celery("bench", broker=broker, backend=None, set_as_current=False)
    app.conf.plus_key_prefix = RUN
    app.conf.plus_pg_schema = pg_schema(RUN)
    if KIND == "plus-hash":  # plus_redis_compact_records off (docs/redis-transport.md)
        app.conf.plus_redis_compact_records = False
    if KIND == "plus-deflate":  # plus_redis_deflate on (docs/configuration.md)
        app.conf.plus_redis_deflate = True
    if KIND == "plus-pg-async":  # plus_pg_synchronous_commit opted in (docs/postgres.md)
        app.conf.plus_pg_synchronous_commit = "off"
    app.conf.plus_visibility_timeout = float(os.environ.get("BENCH_VISIBILITY_TIMEOUT", 30))
else:
    from celery import Celery  # type: ignore[assignment]

    app = Celery("bench", broker=REDIS_URL, set_as_current=False)
    app.conf.broker_transport_options = {"global_keyprefix": f"{RUN}:"}

app.conf.update(
    task_default_queue=QUEUE,
    task_acks_late=True,
    task_ignore_result=True,
    worker_prefetch_multiplier=16 if KIND == "plus-pg-p16" else 4,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)

# The marks' Redis: the store's unless BENCH_MARKS names another (benchmarks/scaling.py keeps
# them off the store whose CPU it measures).
_marks = redis.Redis.from_url(os.environ.get("BENCH_MARKS", REDIS_URL))


@app.task(name="bench.noop")
def noop(i: int, n: int) -> None:
    if i == 0 or i == n - 1:
        _marks.set(f"{RUN}:mark:{i}", repr(time.time()))


@app.task(name="bench.counted")
def counted(i: int, n: int, sleep_s: float = 0.0) -> None:
    count_done(_marks, RUN, n, sleep_s)


@app.task(name="bench.returned")
def returned(i: int, sleep_s: float) -> None:
    """Sleeps, then records its first return time and counts its runs (the kill -9 window)."""
    time.sleep(sleep_s)
    pipe = _marks.pipeline()
    pipe.hsetnx(f"{RUN}:first", str(i), repr(time.time()))
    pipe.hincrby(f"{RUN}:runs", str(i), 1)
    pipe.execute()


@app.task(name="bench.timed")
def timed(i: int) -> None:
    _marks.set(f"{RUN}:returned:{i}", repr(time.time()))
