"""A million waiting jobs: what publishing, claiming, the admin and a worker cost, per store.

Issue #17: with ``--backlog`` (1,000,000) jobs waiting in one queue, against the same store with
none waiting. For each store (``redis``: a private ``redis-server`` started for the run, the
default (compact) layout; ``redis-hash``: the same with ``plus_redis_compact_records = False``;
``sqlite``: a file in the temp folder; ``postgres``: a schema of the test database), two
stores of their own, ``empty`` and ``full``:

1. *fill*: ``full`` gets the backlog, copies of one real ``bench.noop`` envelope (published by
   ``delay()``) with ids of their own, through ``publish_many`` in batches of 1,000 (PostgreSQL:
   one ``INSERT … SELECT`` copying the template's row, as ``publish`` would store it: faster
   still than ``publish_many``'s one statement per batch for a million);
2. *publish*: ``--samples`` single ``publish`` calls (a ``delay()``'s store call): p50 / p99 ms;
3. *claim*: ``--samples`` claims of one job each, each carrying the previous one's ack, as a
   worker's loop does: p50 / p99 ms (in ``full`` from the head of the backlog);
4. *admin*: the dashboard (a threaded wsgiref server) fetched over HTTP ``--rounds`` times:
   the overview, ``/api/status``, ``/metrics``, then the first and a middle page of the
   waiting jobs: median (worst) ms, ``inf`` past 60 s (then not fetched again);
5. *memory*: the store's bytes per waiting job (``used_memory``; the schema's relations after
   ``VACUUM``; the SQLite file after a checkpoint) and the RSS of a real ``celery-plus worker``
   (``--pool solo``, ``benchmarks/bench_app.py``) after it has run 2,000 jobs of the queue.

Every figure of ``full`` is printed next to ``empty``'s, with the ratio; samples and pages are
taken on one store then the other, in turn, so the machine's load weighs on both alike. Each
store is removed afterwards.

    python -m benchmarks.backlog [--stores redis,redis-hash,sqlite,postgres]
                                 [--backlog 1000000] [--samples 1000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import psycopg
import redis

from celery_plus import Celery
from celery_plus.admin import connect
from celery_plus.admin.web import make_app
from celery_plus.model.store import Backend, NewJob, Settle

from .bench_app import pg_schema
from .memory import private_redis
from .pools import _stop as stop_process

ROOT = Path(__file__).resolve().parents[1]
PG_URL = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")
KINDS = {"redis": "plus", "redis-hash": "plus-hash", "sqlite": "plus-sqlite",
         "postgres": "plus-pg"}
WORKER_JOBS = 2_000


@dataclass
class Figures:
    fill_per_s: float = 0.0
    publish_ms: tuple[float, float] = (0.0, 0.0)
    claim_ms: tuple[float, float] = (0.0, 0.0)
    pages: dict[str, tuple[float, float]] = field(default_factory=dict)
    bytes_per_job: float = 0.0
    store_bytes: int = 0
    worker_rss_mb: float = 0.0


class _Threaded(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a page given up on (PAGE_TIMEOUT_S) does not hold the next ones


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def _app(kind: str, run: str, redis_url: str) -> Celery:
    """A celery-plus app on the store ``benchmarks/bench_app.py`` opens for ``run``."""
    if kind == "sqlite":
        broker = f"plus+sqlite:///{tempfile.gettempdir()}/{run}.db"
    elif kind == "postgres":
        broker = f"plus+{PG_URL}"
    else:
        broker = f"plus+{redis_url}"
    app = Celery("bench", broker=broker, backend=None, set_as_current=False)
    app.conf.update(plus_key_prefix=run, plus_pg_schema=pg_schema(run),
                    plus_redis_compact_records=kind != "redis-hash",
                    task_default_queue=f"{run}-q", task_ignore_result=True)
    return app


def _percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return (statistics.median(ordered) * 1000,
            ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000)


def _template(app: Celery, backend: Backend) -> tuple[str, str]:
    """One real envelope of ``bench.noop`` published through ``delay()``: (its id, its text)."""
    result = app.send_task("bench.noop", args=(1, 2))
    raw = backend.raw_message(result.id)
    assert raw is not None, "the template job was not stored"
    return result.id, raw.decode()


def _jobs(template: tuple[str, str], queue: str, start: int, stop: int,
          tag: str) -> list[NewJob]:
    template_id, text = template
    out = []
    for n in range(start, stop):
        job_id = f"{tag}-{n:07d}-{template_id[16:]}"
        out.append(NewJob(id=job_id, queue=queue, message=text.replace(template_id, job_id),
                          name="bench.noop"))
    return out


def _fill_postgres(run: str, template_id: str, backlog: int) -> None:
    """``backlog`` copies of the template job's row, each with an id and a score of its own."""
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'SET search_path TO "{pg_schema(run)}"')
        for start in range(0, backlog, 100_000):
            conn.execute(
                "INSERT INTO jobs (id, queue, name, msg, state, score, max_deliveries, "
                "enqueued_ms, due_ms) "
                "SELECT i, t.queue, t.name, convert_to(replace(convert_from(t.msg, 'UTF8'), "
                "t.id, i), 'UTF8'), t.state, nextval('seq'), t.max_deliveries, t.enqueued_ms, "
                "t.due_ms FROM jobs t, LATERAL (SELECT 'bl-' || lpad(g::text, 7, '0') || '-' "
                "|| substr(t.id, 17) AS i FROM generate_series(%s::bigint, %s::bigint) g) n "
                "WHERE t.id = %s",
                [start, min(start + 100_000, backlog) - 1, template_id])
        conn.execute("ANALYZE jobs")


def _store_bytes(kind: str, run: str, redis_url: str) -> int:
    if kind.startswith("redis"):
        return int(redis.Redis.from_url(redis_url).info("memory")["used_memory"])
    if kind == "postgres":
        schema = pg_schema(run)
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            total = 0
            for (table,) in conn.execute(
                    "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)).fetchall():
                conn.execute(f'VACUUM "{schema}"."{table}"')
                row = conn.execute("SELECT pg_total_relation_size(%s::regclass)",
                                   (f'"{schema}"."{table}"',)).fetchone()
                total += int(row[0]) if row else 0
            return total
    path = Path(tempfile.gettempdir()) / f"{run}.db"
    import sqlite3
    with contextlib.closing(sqlite3.connect(path)) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path.stat().st_size


@contextlib.contextmanager
def _served(app: Celery) -> Iterator[str]:
    server = make_server("127.0.0.1", 0, make_app(app), server_class=_Threaded,
                         handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


def _worker_rss(kind: str, run: str, redis_url: str, backend: Backend, queue: str) -> float:
    """RSS (MB) of a real solo worker once it has taken WORKER_JOBS jobs of ``queue``."""
    env = {**os.environ, "BENCH_KIND": KINDS[kind], "BENCH_RUN": run, "BENCH_REDIS": redis_url,
           "BENCH_PG": PG_URL, "PYTHONPATH": str(ROOT)}
    before = backend.size(queue)
    proc = subprocess.Popen(
        [str(Path(sys.executable).parent / "celery-plus"), "-A", "benchmarks.bench_app", "worker",
         "--pool", "solo", "-Q", queue, "--loglevel", "WARNING", "--without-gossip",
         "--without-mingle", "--without-heartbeat"],
        env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 600
        target = max(0, before - WORKER_JOBS)
        while backend.size(queue) > target:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the worker took {before - backend.size(queue)} jobs, "
                                   f"exit code {proc.returncode}")
            time.sleep(0.2)
        status = Path(f"/proc/{proc.pid}/status").read_text()
        rss_kb = next(int(line.split()[1]) for line in status.splitlines()
                      if line.startswith("VmRSS:"))
        return rss_kb / 1024
    finally:
        stop_process(proc)


PAGE_TIMEOUT_S = 60.0


def _pages(backlog: int) -> dict[str, str]:
    """The pages timed, the waiting listings last (on Redis they read every waiting record)."""
    middle = max(1, backlog // 50 // 2)
    return {"overview /": "/", "/api/status": "/api/status", "/metrics": "/metrics",
            "waiting, page 1": "/jobs/enqueued",
            "waiting, a middle page": f"/jobs/enqueued?page={middle}"}


def _fetch_ms(url: str) -> float:
    """Milliseconds to fetch ``url`` (inf past PAGE_TIMEOUT_S)."""
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(url, timeout=PAGE_TIMEOUT_S) as reply:
            reply.read()
    except (TimeoutError, OSError):
        return float("inf")
    return (time.perf_counter() - started) * 1000


@dataclass
class Side:
    """One store of the comparison: its run name, app, backend, queue and template job."""

    kind: str
    run: str
    app: Celery
    backend: Backend
    queue: str
    template: tuple[str, str]
    figures: Figures = field(default_factory=Figures)
    settles: list[Settle] = field(default_factory=list)


@contextlib.contextmanager
def _side(kind: str, redis_url: str) -> Iterator[Side]:
    run = f"backlog-{kind}-{uuid.uuid4().hex[:8]}"
    app = _app(kind, run, redis_url)
    try:
        with connect(app) as admin:
            backend: Backend = admin.store.backend  # type: ignore[attr-defined]
            yield Side(kind, run, app, backend, f"{run}-q", _template(app, backend))
    finally:
        _cleanup(kind, run, redis_url)


def measure(kind: str, backlog: int, samples: int, rounds: int, redis_url: str
            ) -> tuple[Figures, Figures]:
    """Two stores of ``kind``, none and ``backlog`` jobs waiting, measured side by side:
    each sample and each page is taken on one, then on the other, so the machine's load
    weighs on both alike."""
    with _side(kind, redis_url) as empty, _side(kind, redis_url) as full:
        sides = (empty, full)
        before = _store_bytes(kind, full.run, redis_url)
        started = time.perf_counter()
        if kind == "postgres":
            _fill_postgres(full.run, full.template[0], backlog)
        else:
            for start in range(0, backlog, 1000):
                full.backend.publish_many(_jobs(full.template, full.queue, start,
                                                min(backlog, start + 1000), "bl"))
        full.figures.fill_per_s = backlog / (time.perf_counter() - started)
        full.figures.store_bytes = _store_bytes(kind, full.run, redis_url)
        full.figures.bytes_per_job = (full.figures.store_bytes - before) / backlog
        publish_times: dict[str, list[float]] = {side.run: [] for side in sides}
        claim_times: dict[str, list[float]] = {side.run: [] for side in sides}
        jobs = {side.run: _jobs(side.template, side.queue, 0, samples, "pub") for side in sides}
        for n in range(samples):
            for side in sides:
                t0 = time.perf_counter()
                side.backend.publish(jobs[side.run][n])
                publish_times[side.run].append(time.perf_counter() - t0)
        for _ in range(samples):
            for side in sides:
                t0 = time.perf_counter()
                got = side.backend.claim([side.queue], "bench-claimer", 1, side.settles).claims
                claim_times[side.run].append(time.perf_counter() - t0)
                side.settles = [Settle(c.job_id, c.token, "ack") for c in got]
        for side in sides:
            side.backend.settle(side.settles)
            side.figures.publish_ms = _percentiles(publish_times[side.run])
            side.figures.claim_ms = _percentiles(claim_times[side.run])
        with _served(empty.app) as empty_base, _served(full.app) as full_base:
            bases = {empty.run: empty_base, full.run: full_base}
            for label, path in _pages(backlog).items():
                times: dict[str, list[float]] = {side.run: [] for side in sides}
                for _ in range(rounds):
                    for side in sides:
                        times[side.run].append(_fetch_ms(bases[side.run] + path))
                    if float("inf") in times[full.run]:
                        break  # a page past the timeout is not fetched again
                for side in sides:
                    side.figures.pages[label] = (statistics.median(times[side.run]),
                                                 max(times[side.run]))
                print(f"    {label}: {full.figures.pages[label][0]:.0f} ms median with the "
                      "backlog", flush=True)
        full.figures.worker_rss_mb = _worker_rss(kind, full.run, redis_url, full.backend,
                                                 full.queue)
        return empty.figures, full.figures


def _cleanup(kind: str, run: str, redis_url: str) -> None:
    if kind.startswith("redis"):
        client = redis.Redis.from_url(redis_url)
        for key in client.scan_iter(f"{run}:*", count=10_000):
            client.unlink(key)
        client.close()
    elif kind == "postgres":
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{pg_schema(run)}" CASCADE')
    else:
        for path in Path(tempfile.gettempdir()).glob(f"{run}.db*"):
            path.unlink()


def _row(label: str, empty: float, full: float, unit: str) -> str:
    ratio = f"{full / empty:6.2f}x" if empty else "      -"
    return f"  {label:28} {empty:10.2f} {full:12.2f} {unit:6} {ratio}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stores", default=",".join(KINDS))
    parser.add_argument("--backlog", type=int, default=1_000_000)
    parser.add_argument("--samples", type=int, default=1_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.1f}", flush=True)
    with private_redis() as redis_url:
        for kind in args.stores.split(","):
            empty, full = measure(kind, args.backlog, args.samples, args.rounds, redis_url)
            print(f"{kind}: {args.backlog:,} waiting (full) vs none (empty); "
                  f"bulk fill {full.fill_per_s:,.0f} jobs/s, {full.bytes_per_job:,.0f} "
                  f"bytes per waiting job ({full.store_bytes / 2**20:,.0f} MB)")
            print(f"  {'':28} {'empty':>10} {'full':>12} {'':6} {'full/empty':>7}")
            print(_row("publish p50", empty.publish_ms[0], full.publish_ms[0], "ms"))
            print(_row("publish p99", empty.publish_ms[1], full.publish_ms[1], "ms"))
            print(_row("claim p50", empty.claim_ms[0], full.claim_ms[0], "ms"))
            print(_row("claim p99", empty.claim_ms[1], full.claim_ms[1], "ms"))
            for page, (median, worst) in full.pages.items():
                print(_row(f"{page} median", empty.pages[page][0], median, "ms"))
                print(_row(f"{page} worst", empty.pages[page][1], worst, "ms"))
            print(f"  worker RSS after {WORKER_JOBS:,} jobs of the backlog: "
                  f"{full.worker_rss_mb:.0f} MB", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
