"""The demo's app factory and tasks: a small shop's background jobs.

* ``demo.build_report`` — monthly report per customer, ``concurrency=1`` per ``customer``;
* ``demo.handle_webhook`` — payment-provider webhooks, duplicates coalesced by ``event_id``;
* ``demo.sync_inventory`` — calls a flaky warehouse API: ``autoretry_for`` with backoff;
* ``demo.import_order`` — a poison message: always fails, ends in the dead-letter store;
* ``demo.export_ledger`` — long exports on the ``exports`` queue (the demo kills the worker
  running them; the other worker recovers them once their lease expires).

Tasks record what they do in a small SQLite event log (``CELERY_PLUS_DEMO_EVENTS``) so the
demo can report what happened; without that variable recording is a no-op.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from typing import Any

from celery_plus.app import Celery

MAIN = "celery_plus.demo"
EVENTS_ENV = "CELERY_PLUS_DEMO_EVENTS"
WORKER_ENV = "CELERY_PLUS_DEMO_WORKER"
#: Seconds an export takes on this worker (the demo makes the doomed worker's exports stall).
EXPORT_SECONDS_ENV = "CELERY_PLUS_DEMO_EXPORT_SECONDS"

REPORT_SECONDS = 0.8
WEBHOOK_SECONDS = 2.0
VISIBILITY_TIMEOUT = 3.0

_EVENTS_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS events ("
    " id INTEGER PRIMARY KEY AUTOINCREMENT, t REAL NOT NULL, pid INTEGER NOT NULL,"
    " worker TEXT NOT NULL, kind TEXT NOT NULL, data TEXT NOT NULL)"
)


def _events_db(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=30, isolation_level=None)
    conn.execute("PRAGMA busy_timeout = 30000")
    return conn


def init_events(path: str) -> None:
    """Create the event log (WAL, so workers append while the demo reads)."""
    conn = _events_db(path)
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute(_EVENTS_SCHEMA)
    finally:
        conn.close()


def record(kind: str, **data: Any) -> None:
    """Append an event (time, pid, worker letter) to the demo's event log."""
    path = os.environ.get(EVENTS_ENV)
    if not path:
        return
    conn = _events_db(path)
    try:
        conn.execute(
            "INSERT INTO events (t, pid, worker, kind, data) VALUES (?, ?, ?, ?, ?)",
            (time.time(), os.getpid(), os.environ.get(WORKER_ENV, "?"), kind, json.dumps(data)),
        )
    finally:
        conn.close()


def read_events(path: str, after: int = 0) -> list[dict[str, Any]]:
    """Events with an id above ``after``, oldest first."""
    conn = _events_db(path)
    try:
        rows = conn.execute(
            "SELECT id, t, pid, worker, kind, data FROM events WHERE id > ? ORDER BY id",
            (after,),
        ).fetchall()
    finally:
        conn.close()
    return [{"id": i, "t": t, "pid": pid, "worker": worker, "kind": kind, **json.loads(data)}
            for i, t, pid, worker, kind, data in rows]


def make_app(broker: str | None = None) -> Celery:
    """The demo app. Without ``broker`` it runs on the embedded default (a SQLite file in
    ``./.celery-plus/``), results included."""
    app = Celery(MAIN, broker=broker, backend=broker, set_as_current=False)
    app.conf.update(
        plus_visibility_timeout=VISIBILITY_TIMEOUT,
        plus_maintenance_interval=0.25,
        plus_poll_interval=0.5,
        task_routes={"demo.export_ledger": {"queue": "exports"}},
        result_expires=3600,
        worker_hijack_root_logger=False,
        worker_prefetch_multiplier=1,
    )

    @app.task(name="demo.build_report", concurrency=1, concurrency_key="customer")
    def build_report(customer: str, month: str) -> str:
        record("report.start", customer=customer, month=month)
        time.sleep(REPORT_SECONDS)
        record("report.end", customer=customer, month=month)
        return f"{customer}-{month}.pdf"

    @app.task(name="demo.handle_webhook", unique_by=["event_id"])
    def handle_webhook(event_id: str, delivery: int) -> str:
        record("webhook.start", event_id=event_id, delivery=delivery)
        time.sleep(WEBHOOK_SECONDS)
        record("webhook.end", event_id=event_id, delivery=delivery)
        return event_id

    @app.task(name="demo.sync_inventory", bind=True, autoretry_for=(ConnectionError,),
              retry_backoff=True, retry_jitter=False, max_retries=5)
    def sync_inventory(self: Any, warehouse: str) -> int:
        attempt = self.request.retries + 1
        record("flaky.attempt", warehouse=warehouse, attempt=attempt)
        if attempt < 3:
            raise ConnectionError(f"warehouse {warehouse} API timed out (attempt {attempt})")
        return attempt

    @app.task(name="demo.import_order")
    def import_order(order_id: int) -> None:
        record("poison.start", order_id=order_id)
        raise ValueError(f"order {order_id}: malformed payload (no 'currency' field)")

    @app.task(name="demo.export_ledger")
    def export_ledger(part: int) -> str:
        record("export.start", part=part)
        deadline = time.monotonic() + float(os.environ.get(EXPORT_SECONDS_ENV, "1"))
        while time.monotonic() < deadline:
            time.sleep(0.05)
        record("export.end", part=part)
        return f"ledger-part-{part}.csv"

    return app
