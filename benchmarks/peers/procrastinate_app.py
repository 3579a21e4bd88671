"""Procrastinate with the benchmarks' ``counted`` task, in the run's own schema.

``BENCH_PG`` is the database; ``BENCH_PG_SCHEMA`` the run's schema, reached through the
connections' ``search_path`` (:mod:`.servers` applies Procrastinate's schema there). A job is
committed before ``defer`` returns; a worker that dies leaves its jobs ``doing`` until the user's
own stalled-job task retries them. Run with ``procrastinate --app
benchmarks.peers.procrastinate_app.app worker``.
"""

from __future__ import annotations

import os

import procrastinate
import redis

from benchmarks.marks import count_done

PG_URL = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")
RUN = os.environ.get("BENCH_RUN", "bench")
SCHEMA = os.environ.get("BENCH_PG_SCHEMA", "public")
_marks = redis.Redis.from_url(os.environ.get("BENCH_MARKS", "redis://127.0.0.1:6379/0"))

app = procrastinate.App(connector=procrastinate.PsycopgConnector(
    conninfo=PG_URL, kwargs={"options": f"-c search_path={SCHEMA}"}))


@app.task(name="counted", queue="bench")
def counted(i: int, n: int) -> None:
    count_done(_marks, RUN, n, 0.0)


_opened = False


def _open() -> None:
    global _opened
    if not _opened:
        app.open()
        _opened = True


def send(i: int, n: int) -> None:
    """Defer one job: one INSERT through Procrastinate's function, committed."""
    _open()
    counted.defer(i=i, n=n)


def send_batch(start: int, stop: int, n: int) -> None:
    """Defer jobs ``start`` to ``stop`` with ``batch_defer``."""
    _open()
    counted.batch_defer(*({"i": i, "n": n} for i in range(start, stop)))
