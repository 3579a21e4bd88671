"""Dashboard list pages over 100,000 dead letters in a SQLite store.

Issue 5 (web part), item 4: the web dashboard's listing of dead letters stays fast on a large
store (target: under 200 ms a page). One real dead letter is made through the store (published
by ``send_task``, claimed, settled as failed) and copied with one ``INSERT ... SELECT`` into
``--jobs`` records (distinct ids and finish times); then a real dashboard server (wsgiref, a
thread on 127.0.0.1) answers ``/failed?page=1``, a middle page, the last page and, for
comparison, the status page and ``/metrics``; each is fetched ``--rounds`` times over HTTP and
the median and worst milliseconds are printed.

    python -m benchmarks.dashboard_pages [--jobs 100000] [--rounds 7]
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from celery_plus import Celery
from celery_plus.admin import connect
from celery_plus.admin.web import make_app
from celery_plus.transport.backend import Settle

TARGET_MS = 200.0


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def fill(app: Celery, path: Path, jobs: int) -> float:
    """``jobs`` dead letters in the store at ``path``; returns the seconds it took."""
    started = time.perf_counter()
    admin = connect(app)
    backend = admin.store.backend  # type: ignore[attr-defined]
    template = app.send_task("proj.send_invoice", args=[42], queue="celery").id
    [claim] = backend.claim(["celery"], "bench-worker", 1).claims
    backend.settle([Settle(template, claim.token, "fail", {
        "reason": "task failed", "exc_type": "ConnectionError",
        "exc_message": "SMTP server unreachable",
        "traceback": "Traceback (most recent call last):\nConnectionError: SMTP unreachable"})])
    admin.close()
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
        count = conn.execute("SELECT COUNT(*) FROM jobs WHERE state = 'failed'").fetchone()[0]
    assert count == jobs, count
    return time.perf_counter() - started


def timed(url: str, rounds: int) -> list[float]:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        with urllib.request.urlopen(url, timeout=60) as response:
            response.read()
            assert response.status == 200, (url, response.status)
        times.append((time.perf_counter() - started) * 1000)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="dashboard-bench-") as tmp:
        path = Path(tmp) / "store.db"
        app = Celery("bench", broker=f"plus+sqlite:///{path}", set_as_current=False)
        seconds = fill(app, path, args.jobs)
        print(f"{args.jobs} dead letters inserted in {seconds:.1f} s")
        web = make_app(app)
        server = make_server("127.0.0.1", 0, web, handler_class=_Quiet)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        base = f"http://127.0.0.1:{server.server_port}"
        last = (args.jobs + 49) // 50
        pages = [("/failed?page=1", True), (f"/failed?page={last // 2}", True),
                 (f"/failed?page={last}", True), ("/failed?page=1&queue=mail", True),
                 ("/", False), ("/metrics", False)]
        slow = []
        try:
            timed(base + "/failed?page=1", 1)  # warm-up: connection, page cache
            print(f"{'page':32} {'median ms':>10} {'worst ms':>10}")
            for page, listing in pages:
                times = timed(base + page, args.rounds)
                median = statistics.median(times)
                print(f"{page:32} {median:10.1f} {max(times):10.1f}")
                if listing and median >= TARGET_MS:
                    slow.append(page)
        finally:
            server.shutdown()
            server.server_close()
            web.close()
            app.close()
    verdict = f"over {TARGET_MS:.0f} ms: {', '.join(slow)}" if slow else "all under target"
    print(f"list pages (target < {TARGET_MS:.0f} ms median): {verdict}")


if __name__ == "__main__":
    main()
