"""A beat scheduler that is not celery-plus's and keeps its entries in a database, as
django-celery-beat's ``DatabaseScheduler`` does (issue #30): the scheduler the tests of
``test_other_schedulers.py`` start two ``celery-plus beat`` processes with
(``--scheduler tests.deploy.e2e.db_scheduler:DBScheduler``).

Its entries are rows of a SQLite table (``PLUS_TEST_SCHEDULE_DB``): seeded from
``beat_schedule`` when missing, read anew on every loop (a row added or edited while beat runs
applies at once, as an admin's edit of django-celery-beat's ``PeriodicTask`` does), each
entry's last run written back as it is sent. Every process running it decides on its own when
an entry is due: nothing in it coordinates two beat processes.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

from celery.beat import ScheduleEntry, Scheduler
from celery.schedules import schedule as every


@contextlib.contextmanager
def connect(path: str | None = None) -> Iterator[sqlite3.Connection]:
    db = sqlite3.connect(path or os.environ["PLUS_TEST_SCHEDULE_DB"], timeout=30,
                         isolation_level=None)
    try:
        db.execute("CREATE TABLE IF NOT EXISTS entries (name TEXT PRIMARY KEY, task TEXT NOT "
                   "NULL, every_s REAL NOT NULL, last_run_at REAL)")
        yield db
    finally:
        db.close()


def add_entry(path: str, name: str, task: str, every_s: float) -> None:
    """What an admin does: a new row, no restart."""
    with connect(path) as db:
        db.execute("INSERT INTO entries (name, task, every_s) VALUES (?, ?, ?)",
                   (name, task, every_s))


class DBScheduler(Scheduler):
    def setup_schedule(self) -> None:
        now = self.app.now().timestamp()
        with connect() as db:
            for name, spec in (self.app.conf.beat_schedule or {}).items():
                run_every = spec["schedule"]
                seconds = (run_every.total_seconds() if isinstance(run_every, timedelta)
                           else float(run_every))
                db.execute("INSERT OR IGNORE INTO entries (name, task, every_s, last_run_at) "
                           "VALUES (?, ?, ?, ?)", (name, spec["task"], seconds, now))

    @property
    def schedule(self) -> dict[str, Any]:
        with connect() as db:
            rows = db.execute("SELECT name, task, every_s, last_run_at FROM entries").fetchall()
        entries = {}
        now = self.app.now()
        for name, task, every_s, last in rows:
            last_run_at = (datetime.fromtimestamp(last, tz=timezone.utc) if last is not None
                           else now)
            entries[name] = ScheduleEntry(
                name=name, task=task, last_run_at=last_run_at, app=self.app,
                schedule=every(timedelta(seconds=every_s), app=self.app))
        return entries

    def reserve(self, entry: Any) -> Any:
        new_entry = next(entry)
        with connect() as db:
            db.execute("UPDATE entries SET last_run_at = ? WHERE name = ?",
                       (new_entry.last_run_at.timestamp(), entry.name))
        return new_entry

    def sync(self) -> None:  # every change is written as it happens
        pass
