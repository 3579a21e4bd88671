"""The fault suite's record of every task execution, kept outside the store under test.

Each run of a task writes a row when it starts and completes it when it ends, in a SQLite
file of its own (``synchronous=FULL``: a row written is on disk before the task goes on), so
a worker killed mid-task leaves a started run with no end, and runs lost or made twice are
counted exactly, whatever happens to the store.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id INTEGER PRIMARY KEY,
    job TEXT NOT NULL,      -- the task id
    label TEXT NOT NULL,    -- what the harness called the job
    grp TEXT NOT NULL,      -- concurrency group ('' for none)
    pid INTEGER NOT NULL,
    started REAL NOT NULL,  -- time.time()
    ended REAL,             -- NULL: the run never finished
    stopped INTEGER NOT NULL DEFAULT 0, -- 1: ended by SIGTERM (its worker stopped it)
    resumed REAL            -- when the task's own code first ran again after a freeze
);
CREATE TABLE IF NOT EXISTS children (
    job TEXT NOT NULL,      -- the task id
    run INTEGER NOT NULL,   -- runs.id of the run that started it
    pid INTEGER NOT NULL    -- the process the run started (its real work)
);
"""


@dataclass(frozen=True)
class Run:
    job: str
    label: str
    group: str
    pid: int
    started: float
    ended: float | None
    stopped: bool = False
    #: When the task's own code first ran again after its process was frozen (None: it
    #: never did, e.g. it was stopped as it thawed).
    resumed: float | None = None


#: How long opening the ledger retries while another process holds it (a frozen worker).
OPEN_TIMEOUT_S = 60.0


class Ledger:
    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        deadline = time.monotonic() + OPEN_TIMEOUT_S
        while True:
            try:
                with contextlib.closing(self._connect()) as conn:
                    # WAL is a property of the file: set once, by whichever process comes first.
                    if conn.execute("PRAGMA journal_mode").fetchone()[0] != "wal":
                        conn.execute("PRAGMA journal_mode = WAL")
                    conn.executescript(SCHEMA)
                return
            except sqlite3.OperationalError as exc:
                # SQLITE_PROTOCOL ("locking protocol"): processes opening the file at once
                # raced for the WAL index. SQLITE_BUSY without the busy timeout ("database
                # is locked"): a process froze holding the WAL index's lock. Both pass.
                transient = ("locking protocol", "database is locked")
                if not any(t in str(exc) for t in transient) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def anchor(self) -> sqlite3.Connection:
        """A connection to keep open while workers use the ledger: the last connection to
        close checkpoints the WAL under an exclusive lock, and a worker frozen there (a
        SIGSTOP scenario) kept every other process from opening the file. While this one is
        open, no worker's connection is the last."""
        conn = self._connect()
        conn.execute("SELECT count(*) FROM runs").fetchall()
        return conn

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, timeout=60, isolation_level=None)
        conn.execute("PRAGMA synchronous = FULL")
        return conn

    def start(self, job: str, label: str, group: str = "") -> int:
        with contextlib.closing(self._connect()) as conn:
            cur = conn.execute("INSERT INTO runs (job, label, grp, pid, started) "
                               "VALUES (?, ?, ?, ?, ?)",
                               (job, label, group, os.getpid(), time.time()))
            return int(cur.lastrowid or 0)

    def end(self, run_id: int, stopped: bool = False, resumed: float | None = None) -> None:
        with contextlib.closing(self._connect()) as conn:
            conn.execute("UPDATE runs SET ended = ?, stopped = ?, "
                         "resumed = coalesce(resumed, ?) WHERE id = ?",
                         (time.time(), int(stopped), resumed, run_id))

    def resumed(self, run_id: int, at: float) -> None:
        """The run's own code ran again at ``at`` after its process was frozen."""
        with contextlib.closing(self._connect()) as conn:
            conn.execute("UPDATE runs SET resumed = coalesce(resumed, ?) WHERE id = ?",
                         (at, run_id))

    def first(self, job: str) -> int | None:
        """The id of ``job``'s first run."""
        with contextlib.closing(self._connect()) as conn:
            row = conn.execute("SELECT min(id) FROM runs WHERE job = ?", (job,)).fetchone()
        return None if row is None else row[0]

    def overtaken(self, job: str, run_id: int) -> bool:
        """True once a later run of ``job`` has started."""
        with contextlib.closing(self._connect()) as conn:
            return conn.execute("SELECT 1 FROM runs WHERE job = ? AND id > ?",
                                (job, run_id)).fetchone() is not None

    def child(self, job: str, run_id: int, pid: int) -> None:
        """Run ``run_id`` of ``job`` started process ``pid``."""
        with contextlib.closing(self._connect()) as conn:
            conn.execute("INSERT INTO children (job, run, pid) VALUES (?, ?, ?)",
                         (job, run_id, pid))

    def children(self) -> list[tuple[str, int]]:
        """(job, pid) of every process a run started, in the order of their runs."""
        with contextlib.closing(self._connect()) as conn:
            rows = conn.execute("SELECT job, pid FROM children ORDER BY run").fetchall()
        return [(str(job), int(pid)) for job, pid in rows]

    def runs(self) -> list[Run]:
        with contextlib.closing(self._connect()) as conn:
            rows = conn.execute("SELECT job, label, grp, pid, started, ended, stopped, resumed "
                                "FROM runs ORDER BY started").fetchall()
        return [Run(*row[:6], bool(row[6]), row[7]) for row in rows]
