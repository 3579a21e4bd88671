"""Celery result backend on SQLite: results in a table of the embedded store's file.

``result_backend = "plus+sqlite:////abs/path/file.db"`` (or ``plus+sqlite:///relative.db``)
stores task results, group results and chord counters in the table ``celery_plus_results`` of
that file (the same file the ``plus+sqlite://`` broker uses). It is a Celery
``KeyValueStoreBackend``:

* ``get``/``mget``/``set``/``delete``/``expire``, and ``incr`` with ``implements_incr = True``:
  a chord's header tasks count themselves in one atomic upsert and the last one fires the
  body (no ``chord_unlock`` task polling the results);
* ``result_expires`` (and ``result_failure_expires``) give each row an expiry time; an expired
  row reads as absent and is pruned lazily, a bounded batch at a time;
* stdlib ``sqlite3``, one connection per thread (and per process: a forked child opens its
  own), WAL journal, ``busy_timeout``, and retries when SQLite still answers "database is
  locked": several worker and client processes on one host may share the file.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from celery import states
from celery.backends.base import KeyValueStoreBackend
from celery.exceptions import ImproperlyConfigured

from celery_plus.stores.sqlite.locking import retry_while_locked
from celery_plus.stores.sqlite.url import sqlite_path

T = TypeVar("T")

TABLE = "celery_plus_results"
#: Milliseconds SQLite itself waits for a lock before answering "database is locked".
BUSY_TIMEOUT_MS = 5000
#: Seconds we keep retrying an operation that still found the database locked.
LOCKED_RETRY_S = 60.0
#: Seconds between lazy prunes of expired rows (per process).
PRUNE_INTERVAL_S = 30.0
PRUNE_BATCH = 500
PRUNE_BUSY_INTERVAL_S = 1.0
#: Keys per ``IN (...)`` query of ``mget`` (below SQLite's variable limit).
MGET_CHUNK = 500

_SCHEMA = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} ("
    " key TEXT PRIMARY KEY,"
    " value BLOB NOT NULL,"
    " expires_at REAL"  # unix seconds; NULL = never
    ")",
    f"CREATE INDEX IF NOT EXISTS {TABLE}_expires ON {TABLE} (expires_at)"
    " WHERE expires_at IS NOT NULL",
)


def _now() -> float:
    """Wall-clock seconds: expiry times are shared by every process using the file."""
    return time.time()


def _key(key: Any) -> str:
    return key.decode() if isinstance(key, (bytes, bytearray)) else str(key)


def _value(value: Any) -> bytes:
    """A stored value as bytes (counters are stored as integers)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    return str(value).encode()


class SQLiteResultBackend(KeyValueStoreBackend):
    """Task results in SQLite (``plus+sqlite:////abs/path.db``, ``plus+sqlite:///rel.db``)."""

    implements_incr = True
    supports_native_join = True
    supports_autoexpire = True
    supports_failure_expires = True

    def __init__(self, app: Any, url: str | None = None, **kwargs: Any) -> None:
        super().__init__(app, url=url, **kwargs)
        if not url:
            raise ImproperlyConfigured(
                "The celery-plus SQLite result backend needs a URL such as "
                "'plus+sqlite:////absolute/path/file.db'."
            )
        self.path = sqlite_path(url, setting="result_backend", plain_path=False)
        failure_expires = app.conf.get("result_failure_expires")
        self.failure_expires = (
            self.expires if failure_expires is None
            else self.prepare_expires(failure_expires, type=int)
        )
        self._local = threading.local()
        self._schema_lock = threading.Lock()
        self._schema_ready_pid: int | None = None
        self._next_prune = 0.0

    def __reduce__(self, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        return super().__reduce__(args, {**(kwargs or {}), "url": self.url})

    def as_uri(self, include_password: bool = False) -> str:
        return f"plus+{self.url}"

    # -- connections ------------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        parent = Path(self.path).parent
        if str(parent) not in ("", "."):
            parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000.0,
                               isolation_level=None, check_same_thread=False)
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        self._retry(lambda: conn.execute("PRAGMA journal_mode = WAL").fetchone())
        conn.execute("PRAGMA synchronous = NORMAL")
        return conn

    @property
    def conn(self) -> sqlite3.Connection:
        """This thread's connection (a new one after a fork)."""
        local = self._local
        pid = os.getpid()
        conn: sqlite3.Connection | None = getattr(local, "conn", None)
        if conn is None or getattr(local, "pid", None) != pid:
            conn = self._connect()
            local.conn, local.pid = conn, pid
            self._ensure_schema(conn)
        return conn

    def _ensure_schema(self, conn: sqlite3.Connection) -> None:
        pid = os.getpid()
        if self._schema_ready_pid == pid:
            return
        with self._schema_lock:
            if self._schema_ready_pid == pid:
                return
            for statement in _SCHEMA:
                self._retry(lambda s=statement: conn.execute(s))  # type: ignore[misc]
            self._schema_ready_pid = pid

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None and getattr(self._local, "pid", None) == os.getpid():
            conn.close()
        self._local.conn = None

    def _retry(self, operation: Callable[[], T]) -> T:
        """Run ``operation``, retrying while SQLite reports the database locked."""
        return retry_while_locked(operation, LOCKED_RETRY_S)

    def _write(self, sql: str, params: Sequence[Any]) -> sqlite3.Cursor:
        conn = self.conn
        return self._retry(lambda: conn.execute(sql, params))

    # -- KeyValueStoreBackend ---------------------------------------------------------
    def get(self, key: Any) -> bytes | None:
        conn = self.conn
        row = self._retry(lambda: conn.execute(
            f"SELECT value FROM {TABLE} WHERE key = ?"
            " AND (expires_at IS NULL OR expires_at > ?)", (_key(key), _now()),
        ).fetchone())
        return None if row is None else _value(row[0])

    def mget(self, keys: Sequence[Any]) -> list[bytes | None]:
        names = [_key(k) for k in keys]
        found: dict[str, bytes] = {}
        conn = self.conn
        now = _now()
        for i in range(0, len(names), MGET_CHUNK):
            chunk = names[i:i + MGET_CHUNK]
            marks = ",".join("?" * len(chunk))
            rows = self._retry(lambda c=chunk, m=marks: conn.execute(  # type: ignore[misc]
                f"SELECT key, value FROM {TABLE} WHERE key IN ({m})"
                " AND (expires_at IS NULL OR expires_at > ?)", (*c, now),
            ).fetchall())
            found.update((k, _value(v)) for k, v in rows)
        return [found.get(name) for name in names]

    def _set_with_state(self, key: Any, value: Any, state: str) -> None:
        if state == states.FAILURE:
            self.set(key, value, expires=self.failure_expires)
        else:
            self.set(key, value)

    def set(self, key: Any, value: Any, expires: float | None = None) -> None:
        if expires is None:
            expires = self.expires
        data = value.encode() if isinstance(value, str) else bytes(value)
        expires_at = _now() + float(expires) if expires else None
        self._write(
            f"INSERT INTO {TABLE} (key, value, expires_at) VALUES (?, ?, ?)"
            " ON CONFLICT (key) DO UPDATE SET value = excluded.value,"
            " expires_at = excluded.expires_at",
            (_key(key), data, expires_at),
        )
        self._maybe_prune()

    def delete(self, key: Any) -> None:
        self._write(f"DELETE FROM {TABLE} WHERE key = ?", (_key(key),))

    def incr(self, key: Any) -> int:
        """Add one to the counter at ``key`` (absent or expired counts as 0): one statement."""
        now = _now()
        conn = self.conn
        row = self._retry(lambda: conn.execute(
            f"INSERT INTO {TABLE} (key, value, expires_at) VALUES (?, 1, NULL)"
            " ON CONFLICT (key) DO UPDATE SET"
            "  value = CASE WHEN expires_at IS NOT NULL AND expires_at <= ? THEN 1"
            "          ELSE CAST(value AS INTEGER) + 1 END,"
            "  expires_at = CASE WHEN expires_at IS NOT NULL AND expires_at <= ? THEN NULL"
            "               ELSE expires_at END"
            " RETURNING value",
            (_key(key), now, now),
        ).fetchone())
        return int(row[0])

    def expire(self, key: Any, value: Any) -> None:
        """Expire ``key`` ``value`` seconds from now (0/None: never)."""
        seconds = self.prepare_expires(value, type=float) if value is not None else None
        expires_at = _now() + seconds if seconds else None
        self._write(f"UPDATE {TABLE} SET expires_at = ? WHERE key = ?",
                    (expires_at, _key(key)))

    # -- housekeeping -----------------------------------------------------------------
    def _maybe_prune(self) -> None:
        now = time.monotonic()
        if now < self._next_prune:
            return
        # A full batch means more are waiting: come back soon rather than in 30 s.
        busy = self.prune() >= PRUNE_BATCH
        self._next_prune = now + (PRUNE_BUSY_INTERVAL_S if busy else PRUNE_INTERVAL_S)

    def prune(self, limit: int = PRUNE_BATCH) -> int:
        """Delete up to ``limit`` expired rows; returns how many went."""
        cursor = self._write(
            f"DELETE FROM {TABLE} WHERE rowid IN (SELECT rowid FROM {TABLE}"
            " WHERE expires_at IS NOT NULL AND expires_at <= ? LIMIT ?)",
            (_now(), limit),
        )
        return int(cursor.rowcount)

    def cleanup(self) -> None:
        """Celery's ``celery.backend_cleanup`` hook: prune expired rows."""
        while self.prune() >= PRUNE_BATCH:
            pass
