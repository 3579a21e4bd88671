"""The durable store on SQLite: ``plus+sqlite:///relative.db`` or ``plus+sqlite:////abs/path.db``.

The Redis store (``lua/*.lua``) is the reference semantics: each public method here mirrors one
script and returns the same values, and the private :class:`_Tx` helpers mirror ``lua/lib.lua``.
The schema (``schema.sql``) keeps one row per job whose ``state`` column stands for Redis's
per-state sorted sets.

* Every state change is ONE ``BEGIN IMMEDIATE ... COMMIT`` transaction on a WAL database, so
  worker and publisher processes (and the threads inside them) can share one file. A busy
  database is waited for (``busy_timeout``) and the whole transaction retried, so "database is
  locked" never escapes to the caller (unless the lock is held for minutes).
* SQLite is **single-host**: timestamps are this host's ``time.time()`` in ms, a clock every
  process using the file shares. The file must not live on a network file system.
* Idle consumers do not poll: :meth:`SQLiteBackend.wait` blocks on a Unix datagram socket in
  ``<db>.wake/``, and every transaction that makes work available sends one byte to each
  socket there once it has committed.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import socket
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from importlib import resources
from typing import Any, TypeVar

from celery.exceptions import ImproperlyConfigured
from kombu.exceptions import ConnectionError as KombuConnectionError

from celery_plus.model import rules
from celery_plus.model.details import clean_detail
from celery_plus.model.options import DEFAULT_OPTIONS, OptionsView, StoreOptions
from celery_plus.model.rules import FINISHED, HISTORY_MAX, PRIORITY_FACTOR, WAITING
from celery_plus.model.store import (
    SCHEDULE_COLUMNS,
    WORKER_RECORD_KEEP_MS,
    Backend,
    Claim,
    ClaimResult,
    JobClaim,
    JobRecord,
    NewJob,
    PublishOutcome,
    RateUsage,
    Recovered,
    ScheduledJob,
    ScheduleRecord,
    Settle,
    Verdict,
    WorkerBeat,
    schedule_record,
)
from celery_plus.runtime.fork_guard import guard_across_fork
from celery_plus.runtime.throttled import Throttled
from celery_plus.settings import PlusConfig
from celery_plus.stores import sql_rates
from celery_plus.stores.sql_record import COLUMNS, row_record
from celery_plus.stores.sqlite.locking import retry_while_locked
from celery_plus.stores.sqlite.url import sqlite_path
from celery_plus.stores.waiting import Due, wait_for_work

logger = logging.getLogger("celery_plus.transport.sqlite")

T = TypeVar("T")

TRANSIENT_TTL_MS = 300_000
BUSY_TIMEOUT_MS = 10_000
#: Give up (and raise) only when the database stayed locked this long.
LOCKED_GIVE_UP_S = 120.0
PROMOTE_BATCH = 100
#: Rate groups a claim gives parked jobs back to, at most.
RATE_RELEASE_GROUPS = 20
MAINTAIN_BATCH = 500
UNBLOCK_GROUPS = 50
#: The waiting states as an SQL list (``state IN (...)``), from model/rules.py.
WAITING_SQL = ", ".join(f"'{state}'" for state in WAITING)
#: Unix socket addresses are limited to ~108 bytes; longer paths go through /proc/self/fd.
SOCKET_PATH_MAX = 100

_SCHEMA: str | None = None

#: Wake socket files bound by this process, removed at exit if no close() did it.
_OWN_SOCKETS: set[str] = set()


@atexit.register
def _remove_own_sockets() -> None:
    for path in list(_OWN_SOCKETS):
        if os.path.basename(path).startswith(f"{os.getpid()}-"):
            with contextlib.suppress(OSError):
                os.unlink(path)


def _schema() -> str:
    global _SCHEMA
    if _SCHEMA is None:
        sql = resources.files("celery_plus.stores.sqlite") / "schema.sql"
        _SCHEMA = sql.read_text()
    return _SCHEMA


#: Columns added to ``jobs`` after its first release (``ALTER TABLE`` on older stores), and
#: what is built on them.
ADDED_COLUMNS = (("rate_group", "TEXT"), ("rate_limit", "INTEGER"), ("rate_window_ms", "INTEGER"),
                 ("rate_parked", "INTEGER NOT NULL DEFAULT 0"),
                 # The worker's start mark of the current claim (JobRecord.start_mark).
                 ("start_mark", "INTEGER"))
_ON_ADDED_COLUMNS = ("CREATE INDEX IF NOT EXISTS jobs_rate_parked ON jobs (rate_group, score) "
                     "WHERE state = 'blocked' AND rate_parked = 1")


def _add_columns(conn: sqlite3.Connection) -> None:
    """Give a store made before :data:`ADDED_COLUMNS` those columns (inside the caller's
    schema transaction)."""
    have = {row[1] for row in conn.execute("PRAGMA table_info(jobs)")}
    for name, kind in ADDED_COLUMNS:
        if name not in have:
            conn.execute(f"ALTER TABLE jobs ADD COLUMN {name} {kind}")
    conn.execute(_ON_ADDED_COLUMNS)


def _now_ms() -> int:
    return int(time.time() * 1000)


def _as_bytes(value: str | bytes) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


def _truthy(value: Any) -> bool:
    """Lua truthiness of a decoded JSON value: only absent (None) and false are false."""
    return value is not None and value is not False


def _text(value: Any) -> str:
    """A detail value as Redis stores it with HSET ('' for absent / false)."""
    if not _truthy(value):
        return ""
    return value if isinstance(value, str) else str(value)


#: SQLite result codes (and their messages, for Pythons without ``sqlite_errorname``) of a
#: store that cannot be written or opened for now: a full disk, an I/O error, a missing file,
#: a file or file system that is read-only (a remount, a permission change); with what brings
#: it back. The one place the SQLite store classifies such errors.
_UNAVAILABLE = {"SQLITE_FULL": "database or disk is full", "SQLITE_IOERR": "disk i/o error",
                "SQLITE_CANTOPEN": "unable to open database file",
                "SQLITE_READONLY": "attempt to write a readonly database"}
_REMEDY = {"SQLITE_FULL": "free space on its disk", "SQLITE_IOERR": "check its disk",
           "SQLITE_CANTOPEN": "check its file and directory",
           "SQLITE_READONLY": "make its file and directory writable"}


def unavailable_code(exc: sqlite3.Error) -> str | None:
    """The code of :data:`_UNAVAILABLE` ``exc`` is, or None for an error of the call itself."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    for code, text in _UNAVAILABLE.items():
        if name == code or name.startswith(code + "_") or text in str(exc).lower():
            return code
    return None


#: Least time between two warnings of the same unavailability in one process.
WARN_EVERY_S = 30.0
_warnings = Throttled(logger, WARN_EVERY_S)


class StoreUnavailable(KombuConnectionError):
    """The SQLite store cannot be written or opened for now (disk full, I/O error).

    A kombu connection error: a worker keeps its claims and goes on once the store can be
    written again; a publisher gets Celery's retries, then ``OperationalError`` naming the
    store."""


def _first(conn: sqlite3.Connection, sql: str, params: Sequence[Any] = ()) -> Any:
    """The first row of a query, or None (fetchall: the statement always completes)."""
    rows = conn.execute(sql, params).fetchall()
    return rows[0] if rows else None


class _Tx:
    """One open write transaction at one instant: the helpers of ``lua/lib.lua`` in SQL."""

    def __init__(self, conn: sqlite3.Connection, now: int, backstop_ms: int) -> None:
        self.conn = conn
        self.now = now
        self.backstop = backstop_ms
        #: Set when the transaction makes work available (waiters are woken after COMMIT).
        self.woke = False

    # -- statements ---------------------------------------------------------------------
    def one(self, sql: str, *params: Any) -> Any:
        return _first(self.conn, sql, params)

    def all(self, sql: str, *params: Any) -> list[Any]:
        return self.conn.execute(sql, params).fetchall()

    def scalar(self, sql: str, *params: Any) -> Any:
        row = self.one(sql, *params)
        return None if row is None else row[0]

    def run(self, sql: str, *params: Any) -> int:
        return self.conn.execute(sql, params).rowcount

    # -- counters -----------------------------------------------------------------------
    def incr(self, key: str, by: int = 1) -> int:
        return int(self.scalar(
            "INSERT INTO meta (key, value) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = value + excluded.value RETURNING value",
            key, by))

    def stat(self, name: str) -> None:
        self.incr(f"stats:{name}")

    # -- unique holds -------------------------------------------------------------------
    def live_holder(self, lock: str) -> str | None:
        return self.scalar(
            "SELECT holder FROM holds WHERE lock = ? AND expires_ms >= ?", lock, self.now)

    def set_hold(self, lock: str, holder: str, ttl_ms: int) -> None:
        self.run(
            "INSERT INTO holds (lock, holder, expires_ms) VALUES (?, ?, ?) ON CONFLICT (lock) "
            "DO UPDATE SET holder = excluded.holder, expires_ms = excluded.expires_ms",
            lock, holder, self.now + ttl_ms)

    def take_hold(self, lock: str, job_id: str, window: str | None, ttl_ms: int | None,
                  ms: int) -> str | None:
        """Hold.TAKE (model/rules.py): unique hold ``lock`` for ``job_id`` unless another job
        holds it: a pending/running window for ``ms`` (the due time + the backstop:
        rules.hold_deadline), a ttl window for ``ttl_ms`` and only when the key is free (never
        extended). Returns the other job holding it (a duplicate: nothing taken), or None."""
        holder = self.live_holder(lock)
        if holder is not None and holder != job_id:
            return holder
        if window != "ttl":
            self.set_hold(lock, job_id, ms)
        elif holder is None and (ttl_ms or 0) > 0:
            self.set_hold(lock, job_id, int(ttl_ms or 0))
        return None

    def refresh_hold(self, lock: str, holder: str) -> None:
        """PEXPIRE to the backstop, only if ``holder`` holds it."""
        self.run("UPDATE holds SET expires_ms = ? WHERE lock = ? AND holder = ? "
                 "AND expires_ms >= ?", self.now + self.backstop, lock, holder, self.now)

    def renew_holds(self, limit: int, waiting: bool) -> int:
        """renew_holds of lib.lua: holds lapsing within half a backstop whose job still
        needs them (running, or ``waiting`` and enqueued / blocked / scheduled) get another
        backstop. Bounded."""
        states = f"'running', {WAITING_SQL}" if waiting else "'running'"
        return self.run(
            "UPDATE holds SET expires_ms = ? WHERE lock IN (SELECT h.lock FROM holds h "
            "JOIN jobs j ON j.id = h.holder AND j.unique_lock = h.lock "
            "WHERE h.expires_ms >= ? AND h.expires_ms < ? "
            "AND j.unique_window IN ('pending', 'running') "
            f"AND j.state IN ({states}) "
            "AND (j.state <> 'running' OR j.unique_window = 'running') LIMIT ?)",
            self.now + self.backstop, self.now, self.now + self.backstop // 2, limit)

    def next_token(self, job_id: str) -> int:
        """next_token of lib.lua: from the store-wide counter, above the job's last token."""
        token = self.incr("token")
        old = self.scalar("SELECT token FROM jobs WHERE id = ?", job_id) or 0
        if token <= old:
            token = int(old) + 1
            self.run("UPDATE meta SET value = ? WHERE key = 'token'", token)
        return token

    def drop_hold(self, lock: str, holder: str) -> None:
        self.run("DELETE FROM holds WHERE lock = ? AND holder = ? AND expires_ms >= ?",
                 lock, holder, self.now)

    def release_hold(self, lock: str | None, window: str | None, job_id: str) -> None:
        """Release a non-TTL unique hold, but only if ``job_id`` holds it."""
        if lock and window != "ttl":
            self.drop_hold(lock, job_id)

    # -- concurrency slots --------------------------------------------------------------
    def take_slot(self, job_id: str, group: str | None, limit: int, park: bool) -> bool:
        """Slot.TAKE (model/rules.py): a slot of ``group`` (``limit`` at once) for ``job_id``.
        True when taken, or the job has no group. False when the group is full (counted as
        'blocked'); with ``park`` the job is then parked: blocked, keeping its score (its place
        in line) until a slot is freed (:meth:`free_slot`)."""
        if not group:
            return True
        if self.scalar("SELECT COUNT(*) FROM slots WHERE conc_group = ?", group) >= limit:
            if park:
                self.run("UPDATE jobs SET state = 'blocked', rate_parked = 0 WHERE id = ?",
                         job_id)
            self.stat("blocked")
            return False
        self.run("INSERT OR IGNORE INTO slots (conc_group, job_id) VALUES (?, ?)",
                 group, job_id)
        return True

    # -- state changes ------------------------------------------------------------------
    def enqueue(self, job_id: str) -> None:
        """Back to (or into) its queue; the job keeps its score, hence its place in line."""
        self.run("UPDATE jobs SET state = 'enqueued', rate_parked = 0 WHERE id = ?", job_id)
        self.woke = True

    def unblock_one(self, group: str) -> None:
        """Move the oldest job blocked on a slot of ``group`` back to its queue."""
        job_id = self.scalar("SELECT id FROM jobs WHERE state = 'blocked' AND conc_group = ? "
                             "AND rate_parked = 0 ORDER BY score LIMIT 1", group)
        if job_id is not None:
            self.enqueue(job_id)

    def free_slot(self, group: str | None, job_id: str) -> None:
        if group and self.run("DELETE FROM slots WHERE conc_group = ? AND job_id = ?",
                              group, job_id) == 1:
            self.unblock_one(group)

    def mark_start(self, job_id: str, token: int, mark: int | None) -> None:
        """Apply a worker's start mark to running claim ``token`` of the job (lua
        mark_start): -1 reserved; n >= 0 its task started n ms ago (once per claim)."""
        if mark is None:
            return
        if mark < 0:
            self.run("UPDATE jobs SET start_mark = ? WHERE id = ? AND token = ? "
                     "AND start_mark IS NOT ?", -token, job_id, token, token)
            return
        self.run("UPDATE jobs SET started_ms = max(coalesce(started_ms, ?1), min(?1, ?1 - ?2)), "
                 "start_mark = ?3 WHERE id = ?4 AND token = ?3 AND start_mark IS NOT ?3",
                 self.now, max(int(mark), 0), token, job_id)

    def end_claim(self, job_id: str) -> None:
        """Leave the running state: drop the lease, free the slot. Caller checked the fence."""
        group = self.scalar("UPDATE jobs SET lease_expires_ms = NULL WHERE id = ? "
                            "RETURNING conc_group", job_id)
        self.free_slot(group, job_id)

    def push_history(self, job_id: str, entry: dict[str, Any]) -> None:
        raw = self.scalar("SELECT history FROM jobs WHERE id = ?", job_id)
        hist: list[Any] = []
        if raw:
            with contextlib.suppress(ValueError):
                decoded = json.loads(raw)
                if isinstance(decoded, list):
                    hist = decoded
        hist.append(entry)
        del hist[:-HISTORY_MAX]
        self.run("UPDATE jobs SET history = ? WHERE id = ?",
                 json.dumps(hist, separators=(",", ":")), job_id)

    def verdict(self, job_id: str, token: int) -> Verdict:
        """What became of claim ``token`` of the job, not renewed: ended by its own run, or
        lost (:func:`rules.heartbeat_verdict`, from the record and its history)."""
        row = self.one("SELECT state, token, deliveries, reason, history FROM jobs "
                       "WHERE id = ?", job_id)
        if row is None:
            return Verdict(rules.heartbeat_verdict(token, None, 0, 0, "", ()))
        hist: Any = []
        if row[4]:
            with contextlib.suppress(ValueError):
                hist = json.loads(row[4])
        outcomes = [str(e.get("outcome")) for e in (hist if isinstance(hist, list) else ())
                    if isinstance(e, dict) and e.get("token") == token]
        return Verdict(rules.heartbeat_verdict(token, str(row[0]), int(row[1] or 0),
                                               int(row[2] or 0), row[3] or "", outcomes))

    def attempt_entry(self, job_id: str, outcome: str,
                      detail: dict[str, Any] | None) -> dict[str, Any]:
        row = self.one("SELECT deliveries, worker, started_ms, token FROM jobs WHERE id = ?",
                       job_id)
        entry: dict[str, Any] = {
            "delivery": int(row[0] or 0), "worker": row[1] or "",
            "started_ms": int(row[2] or 0), "finished_ms": self.now, "outcome": outcome,
            "token": int(row[3] or 0),
        }
        if detail:
            for key in ("exc_type", "exc_message"):
                if key in detail:
                    entry[key] = detail[key]
        return entry

    def dead_letter(self, job_id: str, detail: dict[str, Any]) -> None:
        """Dead-letter a job (any state): release its hold, keep the message, record why."""
        lock, window = self.one("SELECT unique_lock, unique_window FROM jobs WHERE id = ?",
                                job_id)
        self.release_hold(lock, window, job_id)
        reason = _text(detail.get("reason")) or "task failed"
        self.push_history(job_id, self.attempt_entry(job_id, reason, detail))
        self.run(
            "UPDATE jobs SET state = 'failed', finished_ms = ?, reason = ?, exc_type = ?, "
            "exc_message = ?, traceback = ? WHERE id = ?",
            self.now, reason, _text(detail.get("exc_type")), _text(detail.get("exc_message")),
            _text(detail.get("traceback")), job_id)
        self.stat("dead_lettered")

    def coalesce(self, job_id: str) -> None:
        self.run("UPDATE jobs SET state = 'completed', finished_ms = ?, reason = 'coalesced' "
                 "WHERE id = ?", self.now, job_id)
        self.stat("deduplicated")

    def schedule(self, job_id: str, due_ms: int) -> None:
        """Waiting, scheduled until ``due_ms`` (it keeps its score); waiters wake to learn
        the due time."""
        self.run("UPDATE jobs SET state = 'scheduled', due_ms = ?, rate_parked = 0 "
                 "WHERE id = ?", due_ms, job_id)
        self.woke = True

    def requeue(self, job_id: str, due_ms: int = 0) -> str:
        """A running job goes back to waiting (scheduled until ``due_ms`` if given); returns
        'requeued' or 'coalesced'.

        The pending window's hold is taken again; if another job took it meanwhile, this one
        coalesces into it.
        """
        lock, window = self.one("SELECT unique_lock, unique_window FROM jobs WHERE id = ?",
                                job_id)
        if lock:
            if window == "pending":
                holder = self.live_holder(lock)
                if holder is not None and holder != job_id:
                    self.coalesce(job_id)
                    return "coalesced"
                self.set_hold(lock, job_id, self.backstop)
            elif window == "running":
                self.refresh_hold(lock, job_id)
        if due_ms:
            self.schedule(job_id, due_ms)
        else:
            self.enqueue(job_id)
        return "requeued"

    # -- cluster rate limits (lib.lua's rate_* helpers) ----------------------------------
    def rate_room(self, group: str, limit: int, window: int) -> int:
        """``limit`` minus the group's starts of the last ``window`` ms and its claims not
        started yet (lapsed ones dropped)."""
        self.run("DELETE FROM rate_claims WHERE rate_group = ? AND ((started = 1 AND at_ms < ?) "
                 "OR (started = 0 AND at_ms < ?))", group, self.now - window, self.now)
        return limit - int(self.scalar("SELECT COUNT(*) FROM rate_claims WHERE rate_group = ?",
                                       group))

    def rate_take(self, group: str, job_id: str, token: int, lease_ms: int) -> None:
        """Count the claim in the window, as not started yet (until its lease deadline)."""
        self.run("INSERT INTO rate_claims (rate_group, started, at_ms, job_id, token) "
                 "VALUES (?, 0, ?, ?, ?)", group, self.now + lease_ms, job_id, token)

    def rate_opens(self, group: str, window: int) -> int:
        """When the group's window next has room: its oldest start leaves it, or its oldest
        claim not started yet lapses."""
        at = self.scalar("SELECT MIN(CASE WHEN started = 1 THEN at_ms + ? + 1 ELSE at_ms END) "
                         "FROM rate_claims WHERE rate_group = ?", window, group)
        return self.now if at is None else int(at)

    def rate_park(self, job_id: str, group: str, window: int) -> None:
        self.run("UPDATE jobs SET state = 'blocked', rate_parked = 1 WHERE id = ?", job_id)
        self.stat("rate_limited")
        self.run("INSERT INTO rate_wake (rate_group, at_ms) VALUES (?, ?) ON CONFLICT "
                 "(rate_group) DO UPDATE SET at_ms = MIN(at_ms, excluded.at_ms)",
                 group, self.rate_opens(group, window))

    def release_rate(self, max_groups: int) -> int:
        """Groups whose window has room get that many parked jobs back, oldest first."""
        released = 0
        for (group,) in self.all("SELECT rate_group FROM rate_wake WHERE at_ms <= ? "
                                 "ORDER BY at_ms LIMIT ?", self.now, max_groups):
            parked = "FROM jobs WHERE state = 'blocked' AND rate_parked = 1 AND rate_group = ?"
            first = self.one(f"SELECT rate_limit, rate_window_ms {parked} ORDER BY score "
                             "LIMIT 1", group)
            window = 0
            if first is not None:
                window = int(first[1] or 0)
                room = self.rate_room(group, int(first[0] or 0), window)
                if room > 0:
                    for (job_id,) in self.all(f"SELECT id {parked} ORDER BY score LIMIT ?",
                                              group, room):
                        self.enqueue(job_id)
                        released += 1
            if self.scalar(f"SELECT 1 {parked} LIMIT 1", group) is None:
                self.run("DELETE FROM rate_wake WHERE rate_group = ?", group)
            else:
                # (an empty window: the jobs given back are not claimed yet; look again in a
                # second)
                opens = self.rate_opens(group, window)
                self.run("UPDATE rate_wake SET at_ms = ? WHERE rate_group = ?",
                         opens if opens > self.now else self.now + 1000, group)
        return released

    def promote_due(self, limit: int) -> int:
        """Move due scheduled jobs to their queues (bounded)."""
        due = self.all("SELECT id FROM jobs WHERE state = 'scheduled' AND due_ms <= ? "
                       "ORDER BY due_ms LIMIT ?", self.now, limit)
        for (job_id,) in due:
            self.enqueue(job_id)
        return len(due)


class SQLiteBackend(OptionsView, Backend):
    """Store operations on one SQLite database file (single host; see the module docstring).

    Takes the shared ``options`` (its ``prefix`` is ignored: one database file is one
    deployment) and ``connect`` (False: open the database at the first call or at
    :meth:`connect`).
    """

    @classmethod
    def from_url(cls, url: str, config: PlusConfig, connection: Any = None) -> SQLiteBackend:
        """The database file at ``url``, opened when first reached: a store that cannot be
        opened is then a connection error kombu and Celery retry (creating a transport must
        not fail for it: Celery creates one inside its reconnection handler)."""
        return cls(url, StoreOptions.of(config), connect=False)


    def __init__(
        self,
        url: str,
        options: StoreOptions = DEFAULT_OPTIONS,
        *,
        connect: bool = True,
    ) -> None:
        self.url = url
        self.path = os.path.abspath(sqlite_path(url, shown=f"plus+{url}"))
        folder = os.path.dirname(self.path)
        if not os.path.isdir(folder):
            raise ImproperlyConfigured(
                f"broker_url 'plus+{url}': directory {folder!r} of the SQLite database does "
                f"not exist; create it or point the URL elsewhere.")
        self.wake_dir = self.path + ".wake"
        self.options = options
        self._group_cursor = ""
        self._reset_process_state()
        guard_across_fork(self)
        if connect:
            self.connect()

    def connect(self) -> None:
        """Open the database (creating the schema): fails at start-up, not at the first
        publish; :class:`StoreUnavailable` while its disk is full (the transport calls it
        when kombu connects, where connection errors are retried)."""
        self._check_process()
        with self._lock:
            self._connection()

    # -- per-process resources ----------------------------------------------------------
    def _reset_process_state(self) -> None:
        """Fresh connection, lock and sockets for this process (also after a fork)."""
        self._pid = os.getpid()
        self._lock = threading.RLock()
        self._conn: sqlite3.Connection | None = None
        self._sender: socket.socket | None = None
        self._dir_fd: int | None = None
        self._waiters: list[tuple[socket.socket, str]] = []
        self._tls = threading.local()

    def fork_lock(self) -> threading.RLock:
        """Held by every SQLite call, and across forks (:mod:`celery_plus.runtime.fork_guard`)."""
        return self._lock

    def _check_process(self) -> None:
        if self._pid != os.getpid():
            # A forked child must not use the parent's SQLite connection or wake sockets;
            # they are abandoned (closing the connection here could disturb the parent).
            for sock, _ in self._waiters:
                with contextlib.suppress(OSError):
                    sock.close()
            self._reset_process_state()

    def _connection(self) -> sqlite3.Connection:
        """The process's connection (caller holds ``self._lock``)."""
        if self._conn is None:
            conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000,
                                   isolation_level=None, check_same_thread=False,
                                   cached_statements=256)
            try:
                self._retry(lambda: self._prepare(conn))
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    @staticmethod
    def _prepare(conn: sqlite3.Connection) -> None:
        conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        try:
            conn.executescript("BEGIN IMMEDIATE;\n" + _schema())
            _add_columns(conn)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:
                with contextlib.suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            raise

    def _retry(self, step: Callable[[], T]) -> T:
        """Run ``step`` while the database is locked (:func:`.locking.retry_while_locked`); a
        store that cannot be written (disk full, I/O error) raises :class:`StoreUnavailable`
        at once, naming the database file."""
        return retry_while_locked(step, LOCKED_GIVE_UP_S, self._unavailable)

    def _unavailable(self, exc: sqlite3.OperationalError) -> BaseException | None:
        code = unavailable_code(exc)
        if code is None:
            return None
        error = StoreUnavailable(f"SQLite store {self.path}: {exc} ({_REMEDY[code]}: "
                                 "celery-plus resumes by itself)")
        _warnings.warn(code, str(error))
        return error

    def _write(self, body: Callable[[_Tx], T]) -> T:
        """Run ``body`` in one BEGIN IMMEDIATE transaction; wake waiters if it made work."""
        self._check_process()
        outcome: list[_Tx] = []

        def attempt() -> T:
            conn = self._connection()
            conn.execute("BEGIN IMMEDIATE")
            try:
                tx = _Tx(conn, _now_ms(), self.backstop_ms)
                result = body(tx)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                raise
            outcome.append(tx)
            return result

        with self._lock:
            result = self._retry(attempt)
        if outcome[-1].woke:
            self._notify()
        return result

    def _read(self, body: Callable[[sqlite3.Connection], T]) -> T:
        """Run a read-only ``body`` (WAL readers never wait for writers)."""
        self._check_process()
        with self._lock:
            return self._retry(lambda: body(self._connection()))

    # -- publishing ---------------------------------------------------------------------
    def publish(self, job: NewJob) -> PublishOutcome:
        """Store one message as a job, deciding uniqueness atomically (publish.lua)."""
        return self._write(lambda tx: self._publish(tx, job))

    def publish_many(self, jobs: Sequence[NewJob]) -> list[PublishOutcome]:
        """Publish several jobs in one transaction; outcomes in order (each decided as publish)."""
        if not jobs:
            return []
        return self._write(lambda tx: [self._publish(tx, job) for job in jobs])

    def _publish(self, tx: _Tx, job: NewJob) -> PublishOutcome:
        row = tx.one("SELECT state, token, unique_lock, unique_window FROM jobs WHERE id = ?",
                     job.id)
        prev, token, old_lock, old_window = row if row is not None else (None, None, None, None)
        continues = int(job.lease_token or 0)
        continued = prev == "running" and continues > 0 and token == continues
        # A job its own delivery already finished (an early ack) is published anew.
        own_finished = continues > 0 and token == continues and prev in FINISHED
        if (prev == "running" or continues > 0) and not continued and not own_finished:
            # A running job without its current lease token, or a continuation whose claim
            # ended: fenced, nothing changes.
            return PublishOutcome(False, job.id, holder_id=job.id, state=prev or "",
                                  fenced=True)
        if continued:
            # Retry / Task.replace: settle the running claim; the new message takes its place.
            tx.end_claim(job.id)
            tx.push_history(job.id, tx.attempt_entry(job.id, "retried", None))
        lock, window = job.unique_lock, job.unique_window
        if lock:
            holder = tx.take_hold(lock, job.id, window, job.unique_ttl_ms,
                                  max(job.eta_ms - tx.now, 0) + self.backstop_ms)
            if holder is not None:
                if continued:
                    tx.release_hold(old_lock, old_window, job.id)
                    tx.coalesce(job.id)
                tx.stat("deduplicated")
                return PublishOutcome(False, job.id, holder_id=holder)
        if old_lock and old_lock != lock:
            # A message with another key (Task.replace, retry with other arguments): the
            # job's old key is free once the new one is decided.
            tx.release_hold(old_lock, old_window, job.id)
        score = job.priority * PRIORITY_FACTOR + tx.incr("seq")
        state = "scheduled" if job.eta_ms > tx.now else "enqueued"
        extension: tuple[Any, ...] = (lock, window, job.unique_ttl_ms, job.concurrency_group,
                                      job.concurrency_limit)
        if prev is None and not lock and not job.concurrency_group:
            extension = (None,) * 5  # absent fields, as publish.lua leaves them out
        rate = ((job.rate_group, job.rate_limit, job.rate_window_ms) if job.rate_group
                else (None, None, None))
        values = (job.queue, job.name, _as_bytes(job.message), state, score, job.max_deliveries,
                  *extension, tx.now, job.eta_ms, *rate)
        if prev is None:
            tx.run(
                "INSERT INTO jobs (queue, name, msg, state, score, deliveries, max_deliveries, "
                "unique_lock, unique_window, unique_ttl_ms, conc_group, conc_limit, "
                "enqueued_ms, due_ms, rate_group, rate_limit, rate_window_ms, id) "
                "VALUES (?, ?, ?, ?, ?, 0, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                *values, job.id)
        else:
            # Same task id again: the new message replaces the job's previous one. A
            # continuation keeps its claim's details; a replacement starts afresh.
            fresh = "" if continued else (
                ", reason = NULL, exc_type = NULL, exc_message = NULL, traceback = NULL, "
                "started_ms = NULL, finished_ms = NULL, worker = NULL")
            tx.run(
                "UPDATE jobs SET queue = ?, name = ?, msg = ?, state = ?, score = ?, "
                "deliveries = 0, max_deliveries = ?, unique_lock = ?, unique_window = ?, "
                "unique_ttl_ms = ?, conc_group = ?, conc_limit = ?, enqueued_ms = ?, "
                "due_ms = ?, rate_group = ?, rate_limit = ?, rate_window_ms = ?, "
                f"rate_parked = 0, lease_expires_ms = NULL{fresh} WHERE id = ?",
                *values, job.id)
        # A scheduled job wakes waiters too: they learn its due time and sleep until then.
        tx.woke = True
        return PublishOutcome(True, job.id, state=state, continued=continued)

    # -- consuming ----------------------------------------------------------------------
    def claim(
        self,
        queues: Sequence[str],
        worker_id: str,
        max_jobs: int,
        settles: Sequence[Settle] = (),
    ) -> ClaimResult:
        """Apply ``settles``, then take up to ``max_jobs`` jobs, in one transaction (claim.lua)."""

        def body(tx: _Tx) -> ClaimResult:
            result = ClaimResult()
            if settles:
                result.dead_lettered = self._settle(tx, settles)
            self._claim(tx, queues, worker_id, max_jobs, result)
            return result

        return self._write(body)

    def _claim(self, tx: _Tx, queues: Sequence[str], worker_id: str, max_jobs: int,
               result: ClaimResult) -> None:
        tx.promote_due(PROMOTE_BATCH)
        tx.release_rate(RATE_RELEASE_GROUPS)
        scan_limit = max(self.scan_limit, 4 * max_jobs)
        taken = scanned = 0
        paused = {row[0] for row in tx.all("SELECT queue FROM paused_queues")}
        for queue in queues:
            if queue in paused:
                continue
            while taken < max_jobs and scanned < scan_limit:
                rows = tx.all(
                    "SELECT id, conc_group, conc_limit, unique_lock, unique_window, msg, "
                    "deliveries, rate_group, rate_limit, rate_window_ms FROM jobs "
                    "WHERE state = 'enqueued' AND queue = ? ORDER BY score LIMIT ?",
                    queue, max_jobs - taken)
                if not rows:
                    break
                for (job_id, group, limit, lock, window, msg, deliveries, rate_group,
                     rate_limit, rate_window) in rows:
                    scanned += 1
                    if rate_group and tx.rate_room(rate_group, rate_limit, rate_window) <= 0:
                        tx.rate_park(job_id, rate_group, rate_window)
                        result.blocked.append(job_id)
                        continue
                    if not tx.take_slot(job_id, group, limit, park=True):
                        result.blocked.append(job_id)
                        continue
                    token, delivery = self._begin_claim(tx, job_id, lock, window, deliveries,
                                                        worker_id)
                    if rate_group:
                        tx.rate_take(rate_group, job_id, token, self.lease_ms)
                    result.claims.append(Claim(job_id, token, bytes(msg), delivery, queue))
                    taken += 1
        first_due = tx.scalar("SELECT MIN(due) FROM (SELECT MIN(due_ms) AS due FROM jobs "
                              "WHERE state = 'scheduled' UNION ALL "
                              "SELECT MIN(at_ms) FROM rate_wake)")
        result.next_due = None if first_due is None else max(first_due - tx.now, 0) / 1000.0

    def _begin_claim(self, tx: _Tx, job_id: str, lock: str | None, window: str | None,
                     deliveries: int, worker_id: str) -> tuple[int, int]:
        """A waiting job (its slot taken) becomes running: holds as ``claim``, token+1,
        deliveries+1, a lease. Returns (token, deliveries)."""
        if lock:
            if window == "pending":
                tx.drop_hold(lock, job_id)
            elif window == "running":
                tx.refresh_hold(lock, job_id)
        delivery = int(deliveries) + 1
        token = tx.next_token(job_id)
        tx.run("UPDATE jobs SET state = 'running', worker = ?, started_ms = ?, "
               "deliveries = ?, token = ?, lease_expires_ms = ?, rate_parked = 0 WHERE id = ?",
               worker_id, tx.now, delivery, token, tx.now + self.lease_ms, job_id)
        return token, delivery

    def claim_job(self, job_id: str, worker_id: str) -> JobClaim:
        """Claim one waiting job by id, in one transaction (``lua/claim_job.lua``)."""

        def body(tx: _Tx) -> JobClaim:
            row = tx.one("SELECT state, conc_group, conc_limit, unique_lock, unique_window, "
                         "deliveries, lease_expires_ms FROM jobs WHERE id = ?", job_id)
            if row is None:
                return JobClaim("missing")
            state, group, limit, lock, window, deliveries, lease = row
            if state == "running":
                left = max(int(lease if lease is not None else tx.now) - tx.now, 0)
                return JobClaim("held", state, deliveries=int(deliveries), lease_left_ms=left)
            if state not in WAITING:
                return JobClaim("finished", state)
            if not tx.take_slot(job_id, group, limit, park=False):
                return JobClaim("blocked", state)
            token, delivery = self._begin_claim(tx, job_id, lock, window, deliveries,
                                                worker_id)
            return JobClaim("claimed", "running", token, delivery)

        return self._write(body)

    def settle(self, settles: Sequence[Settle]) -> list[tuple[str, str]]:
        """End claims, fenced by (id, token); returns the dead-lettered (id, reason) pairs."""
        if not settles:
            return []
        return self._write(lambda tx: self._settle(tx, settles))

    def _settle(self, tx: _Tx, settles: Sequence[Settle]) -> list[tuple[str, str]]:
        dead: list[tuple[str, str]] = []
        for s in settles:
            row = tx.one("SELECT unique_lock, unique_window, deliveries, max_deliveries "
                         "FROM jobs WHERE id = ? AND state = 'running' AND token = ?",
                         s.job_id, int(s.token))
            if row is None:
                continue  # stale: the claim ended or was taken over
            lock, window, deliveries, limit = row
            tx.mark_start(s.job_id, int(s.token), s.run_ms)
            detail = clean_detail(s.detail)
            tx.end_claim(s.job_id)
            if s.action == "ack":
                tx.release_hold(lock, window, s.job_id)
                tx.run("UPDATE jobs SET state = 'completed', finished_ms = ? WHERE id = ?",
                       tx.now, s.job_id)
            elif s.action == "release":
                tx.run("UPDATE jobs SET deliveries = ? WHERE id = ?",
                       max(int(deliveries) - 1, 0), s.job_id)
                tx.requeue(s.job_id)
            elif s.action in ("requeue", "defer"):
                if rules.at_delivery_limit(deliveries, limit):
                    detail = detail or {}
                    detail["reason"] = "delivery limit"
                    if not _truthy(detail.get("exc_message")):
                        detail["exc_message"] = (
                            f"message delivered {deliveries} times without being settled")
                    tx.dead_letter(s.job_id, detail)
                    dead.append((s.job_id, "delivery limit"))
                else:
                    defer = s.action == "defer"
                    reason = (_text((detail or {}).get("reason"))
                              or ("deferred" if defer else "requeued"))
                    tx.push_history(s.job_id, tx.attempt_entry(s.job_id, reason, detail))
                    tx.requeue(s.job_id, tx.now + rules.defer_ms(deliveries) if defer else 0)
            else:  # fail, reject
                detail = detail or {}
                if s.action == "reject" and not _truthy(detail.get("reason")):
                    detail["reason"] = "rejected"
                tx.dead_letter(s.job_id, detail)
                dead.append((s.job_id, _text(detail.get("reason")) or "task failed"))
        return dead

    def heartbeat(self, held: Sequence[tuple[str, int]],
                  starts: Sequence[int | None] | None = None) -> list[Verdict]:
        """Renew the leases of claims still ours; one verdict per claim, in order (the
        others ended by their own run or were lost: :meth:`_Tx.verdict`); a renewed
        claim's start mark applied (:meth:`_Tx.mark_start`)."""
        if not held:
            return []
        marks = starts if starts is not None else [None] * len(held)

        def body(tx: _Tx) -> list[Verdict]:
            deadline = tx.now + self.lease_ms
            verdicts = []
            for (job_id, token), mark in zip(held, marks, strict=True):
                if tx.run("UPDATE jobs SET lease_expires_ms = ? WHERE id = ? "
                          "AND state = 'running' AND token = ?", deadline, job_id,
                          int(token)) == 0:
                    verdicts.append(tx.verdict(job_id, int(token)))
                    continue
                verdicts.append(Verdict.RENEWED)
                tx.mark_start(job_id, int(token), mark)
                # A rate-group claim not started yet counts on (heartbeat.lua).
                tx.run("UPDATE rate_claims SET at_ms = ? WHERE job_id = ? AND token = ? "
                       "AND started = 0 AND at_ms >= ? AND rate_group = (SELECT rate_group "
                       "FROM jobs WHERE id = ?)", deadline, job_id, int(token), tx.now, job_id)
            return verdicts

        return self._write(body)

    def recover(self, limit: int = 100) -> list[Recovered]:
        """Return claims whose stored lease deadline passed (recover.lua)."""

        def body(tx: _Tx) -> list[Recovered]:
            out: list[Recovered] = []
            expired = tx.all(
                "SELECT id, deliveries, max_deliveries, worker FROM jobs WHERE state = 'running' "
                "AND lease_expires_ms <= ? ORDER BY lease_expires_ms LIMIT ?", tx.now, limit)
            for job_id, deliveries, max_deliveries, worker in expired:
                tx.end_claim(job_id)
                tx.stat("recovered")
                if max_deliveries > 0 and deliveries >= max_deliveries:
                    tx.dead_letter(job_id, {
                        "reason": "delivery limit",
                        "exc_message": f"message delivered {deliveries} times; last lease expired",
                    })
                    out.append(Recovered(job_id, "dead"))
                else:
                    why = f"lease expired (claimed by {worker if worker is not None else '?'})"
                    tx.push_history(job_id, tx.attempt_entry(job_id, "lease expired",
                                                             {"exc_message": why}))
                    out.append(Recovered(job_id, tx.requeue(job_id)))
            return out

        return self._write(body)

    def maintain(self, worker_id: str) -> bool:
        """Run housekeeping if no other worker ran it this interval. True if it ran."""

        def body(tx: _Tx) -> bool:
            taken_until = tx.scalar("SELECT value FROM meta WHERE key = 'maint'")
            if taken_until is not None and taken_until >= tx.now:
                return False
            tx.run("INSERT INTO meta (key, value) VALUES ('maint', ?) "
                   "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                   tx.now + self.maintenance_interval_ms)
            self._maintain(tx)
            return True

        return self._write(body)

    def _maintain(self, tx: _Tx) -> tuple[int, int, int]:
        """maintain.lua: promote, unblock, prune. Returns (promoted, unblocked, pruned)."""
        promoted = tx.promote_due(MAINTAIN_BATCH)
        tx.renew_holds(MAINTAIN_BATCH, self.renews_waiting_holds)
        # Every rate group with parked jobs is looked at again (a wake-up lost to nothing else).
        tx.run("INSERT OR IGNORE INTO rate_wake (rate_group, at_ms) SELECT DISTINCT "
               "rate_group, ? FROM jobs WHERE state = 'blocked' AND rate_parked = 1 LIMIT ?",
               tx.now, UNBLOCK_GROUPS)
        unblocked = tx.release_rate(MAINTAIN_BATCH)
        for group in self._blocked_groups(tx):
            # Slot entries whose job is no longer running are stale.
            tx.run("DELETE FROM slots WHERE conc_group = ? AND NOT EXISTS (SELECT 1 FROM jobs "
                   "WHERE jobs.id = slots.job_id AND jobs.state = 'running')", group)
            limit = tx.scalar("SELECT conc_limit FROM jobs WHERE state = 'blocked' "
                              "AND conc_group = ? ORDER BY score LIMIT 1", group) or 0
            free = limit - tx.scalar("SELECT COUNT(*) FROM slots WHERE conc_group = ?", group)
            while free > 0 and tx.scalar("SELECT 1 FROM jobs WHERE state = 'blocked' "
                                         "AND conc_group = ? AND rate_parked = 0 LIMIT 1",
                                         group):
                tx.unblock_one(group)
                free -= 1
                unblocked += 1
        comp_ret, comp_max, dead_ret, dead_max = self.retention
        pruned = (self._prune(tx, "completed", comp_ret, comp_max)
                  + self._prune(tx, "failed", dead_ret, dead_max)
                  + self._prune(tx, "canceled", comp_ret, comp_max)
                  + self._prune(tx, "discarded", comp_ret, comp_max))
        # Expired holds and transient messages are absent already; drop their rows.
        tx.run("DELETE FROM holds WHERE lock IN (SELECT lock FROM holds WHERE expires_ms < ? "
               "LIMIT ?)", tx.now, MAINTAIN_BATCH)
        tx.run("DELETE FROM transient WHERE id IN (SELECT id FROM transient "
               "WHERE expires_ms < ? LIMIT ?)", tx.now, MAINTAIN_BATCH)
        return promoted, unblocked, pruned

    def _blocked_groups(self, tx: _Tx) -> list[str]:
        """Up to UNBLOCK_GROUPS groups having blocked jobs, rotating between passes."""
        groups: list[str] = []
        start = self._group_cursor
        for low, high in ((start, None), ("", start)):
            cursor = low
            while len(groups) < UNBLOCK_GROUPS:
                group = tx.scalar("SELECT MIN(conc_group) FROM jobs INDEXED BY jobs_blocked "
                                  "WHERE state = 'blocked' AND conc_group > ?", cursor)
                if group is None or (high is not None and group > high):
                    break
                groups.append(group)
                cursor = group
            if not start:
                break
        self._group_cursor = groups[-1] if len(groups) >= UNBLOCK_GROUPS else ""
        return groups

    @staticmethod
    def _prune(tx: _Tx, state: str, retention_ms: int, max_count: int) -> int:
        pruned = tx.run(
            "DELETE FROM jobs WHERE id IN (SELECT id FROM jobs WHERE state = ? "
            "AND finished_ms <= ? ORDER BY finished_ms, id LIMIT ?)",
            state, tx.now - retention_ms, MAINTAIN_BATCH)
        excess = tx.scalar("SELECT COUNT(*) FROM jobs WHERE state = ?", state) - max_count
        if excess > 0:
            pruned += tx.run(
                "DELETE FROM jobs WHERE id IN (SELECT id FROM jobs WHERE state = ? "
                "ORDER BY finished_ms, id LIMIT ?)", state, min(excess, MAINTAIN_BATCH))
        return pruned

    # -- idle wake-up -------------------------------------------------------------------
    def rate_started(self, job_id: str, token: int) -> None:
        """lua/rate_start.lua: the claim counts by its start time from now on."""

        def body(tx: _Tx) -> None:
            row = tx.one("SELECT rate_group, rate_window_ms FROM jobs WHERE id = ?", job_id)
            if row is None or not row[0]:
                return
            group, window = row[0], int(row[1] or 0)
            tx.run("DELETE FROM rate_claims WHERE rate_group = ? AND job_id = ? AND token = ?",
                   group, job_id, token)
            tx.run("INSERT INTO rate_claims (rate_group, started, at_ms, job_id, token) "
                   "VALUES (?, 1, ?, ?, ?)", group, tx.now, job_id, token)
            tx.run("UPDATE rate_wake SET at_ms = MIN(at_ms, ?) WHERE rate_group = ?",
                   tx.rate_opens(group, window), group)

        self._write(body)

    # -- leases of roles and periodic schedules ----------------------------------------
    def lead(self, role: str, holder: str, ttl_ms: int) -> bool:
        """Take or renew ``role``'s lease for ``holder`` (lua/lead.lua), one transaction."""

        def body(tx: _Tx) -> bool:
            return tx.scalar(
                "INSERT INTO leases (role, holder, expires_ms) VALUES (?, ?, ?) "
                "ON CONFLICT (role) DO UPDATE SET holder = excluded.holder, "
                "expires_ms = excluded.expires_ms "
                "WHERE leases.holder = excluded.holder OR leases.expires_ms < ? "
                "RETURNING holder", role, holder, tx.now + max(int(ttl_ms), 1), tx.now,
            ) is not None

        return self._write(body)

    def resign(self, role: str, holder: str) -> None:
        self._write(lambda tx: tx.run("DELETE FROM leases WHERE role = ? AND holder = ?",
                                      role, holder))

    def role_holder(self, role: str) -> tuple[str, int] | None:
        row = self._read(lambda conn: conn.execute(
            "SELECT holder, expires_ms FROM leases WHERE role = ? AND expires_ms >= ?",
            (role, _now_ms())).fetchone())
        return (str(row[0]), int(row[1])) if row else None

    def schedule_register(self, name: str, last_due_ms: int, task: str = "",
                          schedule: str = "") -> ScheduleRecord:
        def body(tx: _Tx) -> ScheduleRecord:
            tx.run("INSERT INTO schedules (name, last_due_ms, task, schedule) "
                   "VALUES (?, ?, ?, ?) ON CONFLICT (name) DO UPDATE SET task = excluded.task, "
                   "schedule = excluded.schedule", name, int(last_due_ms), task, schedule)
            return schedule_record(tx.one(f"SELECT {SCHEDULE_COLUMNS} FROM schedules "
                                           "WHERE name = ?", name))

        return self._write(body)

    def schedule_fire(self, name: str, expected_last_ms: int, due_ms: int, next_ms: int,
                      job: NewJob | None) -> str:
        """lua/fire.lua: the fence, the entry's advance and the tick's publish, one
        transaction."""

        def body(tx: _Tx) -> str:
            row = tx.one("SELECT last_due_ms, paused FROM schedules WHERE name = ?", name)
            if row is None:
                return "missing"
            if int(row[0]) != int(expected_last_ms):
                return "stale"
            tx.run("UPDATE schedules SET last_due_ms = ?, next_due_ms = ? WHERE name = ?",
                   int(due_ms), int(next_ms), name)
            if row[1]:
                return "paused"
            if job is None:
                return "skipped"
            tx.run("UPDATE schedules SET last_job = ?, fired = fired + 1 WHERE name = ?",
                   job.id, name)
            self._publish(tx, job)
            return "fired"

        return self._write(body)

    def schedules(self) -> list[ScheduleRecord]:
        rows = self._read(lambda conn: conn.execute(
            f"SELECT {SCHEDULE_COLUMNS} FROM schedules ORDER BY name").fetchall())
        return [schedule_record(row) for row in rows]

    def schedule_pause(self, name: str, paused: bool) -> bool:
        return bool(self._write(lambda tx: tx.run(
            "UPDATE schedules SET paused = ? WHERE name = ?", int(paused), name)))

    def schedule_delete(self, name: str) -> bool:
        return bool(self._write(lambda tx: tx.run("DELETE FROM schedules WHERE name = ?", name)))

    def queue_pause(self, queue: str, paused: bool) -> int:
        """One BEGIN IMMEDIATE transaction, so no claim commits between its check and it."""

        def body(tx: _Tx) -> int:
            if paused:
                tx.run("INSERT OR IGNORE INTO paused_queues (queue, paused_ms) VALUES (?, ?)",
                       queue, tx.now)
            elif tx.run("DELETE FROM paused_queues WHERE queue = ?", queue):
                tx.woke = True
            return int(tx.now)

        return self._write(body)

    def paused_queues(self) -> dict[str, int]:
        rows = self._read(lambda conn: conn.execute(
            "SELECT queue, paused_ms FROM paused_queues").fetchall())
        return {str(queue): int(ms) for queue, ms in rows}

    def worker_beat(self, beat: WorkerBeat) -> None:
        def body(tx: _Tx) -> None:
            tx.run("INSERT INTO workers (node, info, started_ms, at_ms) VALUES (?1, ?2, ?3, ?3) "
                   "ON CONFLICT (node) DO UPDATE SET info = excluded.info, at_ms = excluded.at_ms, "
                   "started_ms = CASE WHEN json_extract(workers.info, '$.pid') = "
                   "json_extract(excluded.info, '$.pid') THEN workers.started_ms "
                   "ELSE excluded.started_ms END", beat.node, json.dumps(beat.info()), tx.now)
            tx.run("DELETE FROM workers WHERE at_ms < ?", tx.now - WORKER_RECORD_KEEP_MS)

        self._write(body)

    def rate_usage(self) -> list[RateUsage]:
        def rows(sql: str, params: Sequence[Any]) -> list[Any]:
            return self._read(lambda conn: conn.execute(sql, list(params)).fetchall())

        return sql_rates.rate_usage(rows, self.now_ms(), "?", "1")

    def worker_beats(self) -> list[WorkerBeat]:
        rows = self._read(lambda conn: conn.execute(
            "SELECT node, info, started_ms, at_ms FROM workers ORDER BY node").fetchall())
        return [WorkerBeat.of(str(n), info, int(s), int(a)) for n, info, s, a in rows]

    def wait(
        self, queues: Sequence[str], transient: Sequence[str], timeout: float
    ) -> tuple[str, str, bytes | None] | None:
        """Block until durable work for ``queues`` or a message on ``transient`` queues.

        Returns ``("wake", queue, None)`` when a job of ``queues`` is ready (enqueued, or
        scheduled and due), ``("transient", queue, body)`` with a popped transient message,
        or None after ``timeout`` seconds. Ready work is looked for before blocking (the
        socket is bound first, so a publish in between still wakes this wait), and again on
        each wake-up; wake-ups for other queues do not end the wait.
        """
        if not queues and not transient:
            return None
        sock = self._waiter_socket()

        def look() -> Due:
            self._drain_socket(sock)
            return self._due(queues)

        def block(pause: float) -> None:
            sock.settimeout(pause)
            with contextlib.suppress(TimeoutError, InterruptedError):
                sock.recv(64)

        return wait_for_work(look, self.pop_transient, transient, block, timeout)

    def _due(self, queues: Sequence[str]) -> Due:
        """What ``queues`` hold now (:class:`~celery_plus.stores.waiting.Due`), one read."""
        if not queues:
            return Due()
        marks = ", ".join("?" * len(queues))

        def look(conn: sqlite3.Connection) -> tuple[Any, Any]:
            ready = _first(
                conn, f"SELECT queue FROM jobs WHERE state = 'enqueued' "
                f"AND queue IN ({marks}) AND queue NOT IN (SELECT queue FROM paused_queues) "
                "LIMIT 1", tuple(queues))
            if ready is not None:
                return ready, None
            return None, _first(
                conn, f"SELECT queue, due_ms FROM jobs WHERE state = 'scheduled' "
                f"AND queue IN ({marks}) AND queue NOT IN (SELECT queue FROM paused_queues) "
                "ORDER BY due_ms LIMIT 1", tuple(queues))

        ready, scheduled = self._read(look)
        if ready is not None:
            return Due(ready=ready[0])
        if scheduled is None:
            return Due()
        return Due(scheduled=scheduled[0], due_in_s=(scheduled[1] - _now_ms()) / 1000.0)

    def _waiter_socket(self) -> socket.socket:
        """This thread's wake socket, bound in ``<db>.wake/`` on first use."""
        self._check_process()
        sock: socket.socket | None = getattr(self._tls, "sock", None)
        if sock is not None:
            return sock
        os.makedirs(self.wake_dir, exist_ok=True)
        name = f"{os.getpid()}-{uuid.uuid4().hex[:12]}.sock"
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            with self._lock:
                address = self._address(name)
            sock.bind(address)
        except OSError:
            sock.close()
            raise
        self._tls.sock = sock
        path = os.path.join(self.wake_dir, name)
        _OWN_SOCKETS.add(path)
        with self._lock:
            self._waiters.append((sock, path))
        return sock

    @staticmethod
    def _drain_socket(sock: socket.socket) -> None:
        sock.setblocking(False)
        with contextlib.suppress(BlockingIOError, InterruptedError):
            while sock.recv(64):
                pass

    def _address(self, name: str) -> str:
        """A socket address for ``name`` in the wake directory, short enough for AF_UNIX."""
        full = os.path.join(self.wake_dir, name)
        if len(full.encode()) < SOCKET_PATH_MAX:
            return full
        if self._dir_fd is None:
            self._dir_fd = os.open(self.wake_dir, os.O_RDONLY | os.O_DIRECTORY)
        return f"/proc/self/fd/{self._dir_fd}/{name}"

    def _notify(self) -> None:
        """Send one byte to every waiter's socket (after a commit that made work available)."""
        try:
            names = os.listdir(self.wake_dir)
        except OSError:
            return  # nobody ever waited on this database
        with self._lock:
            if self._sender is None:
                self._sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                self._sender.setblocking(False)
            sender = self._sender
            addresses = [(name, self._address(name)) for name in names if name.endswith(".sock")]
        for name, address in addresses:
            try:
                sender.sendto(b"\x01", address)
            except (BlockingIOError, InterruptedError):
                continue  # that waiter has wake-ups queued already
            except (ConnectionRefusedError, FileNotFoundError):
                # Its process is gone: remove the leftover socket file.
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(self.wake_dir, name))
            except OSError:
                continue

    # -- transient messages (remote control, replies, events) ---------------------------
    def push_transient(self, queue: str, message: bytes | str) -> None:
        """Append to a transient queue; the queue expires 300 s after its last push."""

        def body(tx: _Tx) -> None:
            expires = tx.now + TRANSIENT_TTL_MS
            tx.run("UPDATE transient SET expires_ms = ? WHERE queue = ?", expires, queue)
            tx.run("INSERT INTO transient (queue, body, expires_ms) VALUES (?, ?, ?)",
                   queue, _as_bytes(message), expires)
            tx.woke = True

        self._write(body)

    def pop_transient(self, queue: str) -> bytes | None:
        # A read first: consumers pop every transient queue on each loop, mostly in vain,
        # and a read takes no write lock.
        if not self.transient_size(queue):
            return None

        def body(tx: _Tx) -> bytes | None:
            value = tx.scalar(
                "DELETE FROM transient WHERE id = (SELECT id FROM transient WHERE queue = ? "
                "AND expires_ms >= ? ORDER BY id LIMIT 1) RETURNING body", queue, tx.now)
            return None if value is None else bytes(value)

        return self._write(body)

    def transient_size(self, queue: str) -> int:
        return int(self._read(lambda conn: _first(
            conn, "SELECT COUNT(*) FROM transient WHERE queue = ? AND expires_ms >= ?",
            (queue, _now_ms())))[0])

    def scheduled_jobs(self, queues: Sequence[str], limit: int = 1000) -> list[ScheduledJob]:
        if not queues:
            return []
        marks = ", ".join("?" * len(queues))
        rows = self._read(lambda conn: conn.execute(
            f"SELECT id, queue, due_ms, msg FROM jobs WHERE state = 'scheduled' "
            f"AND queue IN ({marks}) ORDER BY due_ms, id LIMIT ?",
            (*queues, limit)).fetchall())
        return [ScheduledJob(row[0], row[1], int(row[2]), bytes(row[3])) for row in rows]

    def purge_transient(self, queue: str) -> int:
        def body(tx: _Tx) -> int:
            live = int(tx.scalar("SELECT COUNT(*) FROM transient WHERE queue = ? "
                                 "AND expires_ms >= ?", queue, tx.now))
            tx.run("DELETE FROM transient WHERE queue = ?", queue)
            return live

        return self._write(body)

    def bind(self, exchange: str, binding: str, ttl_ms: int = 0) -> None:
        def body(tx: _Tx) -> None:
            # Lapsed bindings of this exchange go first (reads only skip them).
            tx.run("DELETE FROM bindings WHERE exchange = ? AND binding IN (SELECT binding "
                   "FROM binding_deadlines WHERE exchange = ? AND expires_ms < ?)",
                   exchange, exchange, tx.now)
            tx.run("DELETE FROM binding_deadlines WHERE exchange = ? AND expires_ms < ?",
                   exchange, tx.now)
            tx.run("INSERT OR IGNORE INTO bindings (exchange, binding) VALUES (?, ?)",
                   exchange, binding)
            if ttl_ms > 0:
                tx.run("INSERT OR REPLACE INTO binding_deadlines (exchange, binding, "
                       "expires_ms) VALUES (?, ?, ?)", exchange, binding, tx.now + ttl_ms)
            else:
                tx.run("DELETE FROM binding_deadlines WHERE exchange = ? AND binding = ?",
                       exchange, binding)

        self._write(body)

    def unbind(self, exchange: str, binding: str) -> None:
        def body(tx: _Tx) -> None:
            tx.run("DELETE FROM bindings WHERE exchange = ? AND binding = ?", exchange, binding)
            tx.run("DELETE FROM binding_deadlines WHERE exchange = ? AND binding = ?",
                   exchange, binding)

        self._write(body)

    def bindings(self, exchange: str) -> list[str]:
        return [row[0] for row in self._read(lambda conn: conn.execute(
            "SELECT b.binding FROM bindings b LEFT JOIN binding_deadlines d "
            "ON d.exchange = b.exchange AND d.binding = b.binding "
            "WHERE b.exchange = ? AND (d.expires_ms IS NULL OR d.expires_ms >= ?)",
            (exchange, _now_ms())).fetchall())]

    def mark_transient(self, queue: str, ttl_ms: int) -> None:
        def body(tx: _Tx) -> None:
            tx.run("DELETE FROM transient_marks WHERE expires_ms < ?", tx.now)
            tx.run("INSERT OR REPLACE INTO transient_marks (queue, expires_ms) VALUES (?, ?)",
                   queue, tx.now + max(int(ttl_ms), 1))

        self._write(body)

    def is_marked_transient(self, queue: str) -> bool:
        return self._read(lambda conn: _first(
            conn, "SELECT 1 FROM transient_marks WHERE queue = ? AND expires_ms >= ?",
            (queue, _now_ms()))) is not None

    # -- queue management ---------------------------------------------------------------
    def size(self, queue: str) -> int:
        """Number of enqueued jobs of ``queue``."""
        return int(self._read(lambda conn: _first(
            conn, "SELECT COUNT(*) FROM jobs WHERE state = 'enqueued' AND queue = ?",
            (queue,)))[0])

    def purge(self, queue: str) -> int:
        """Delete the jobs waiting in ``queue`` and release their holds (as ``purge.lua``).

        Waiting = enqueued, blocked and scheduled; running jobs stay. One transaction.
        """

        def body(tx: _Tx) -> int:
            waiting = tx.all(
                f"SELECT id, unique_lock, unique_window FROM jobs WHERE state IN ({WAITING_SQL}) "
                "AND queue = ?", queue)
            for job_id, lock, window in waiting:
                tx.release_hold(lock, window, job_id)
            tx.run(f"DELETE FROM jobs WHERE state IN ({WAITING_SQL}) AND queue = ?", queue)
            return len(waiting)

        return self._write(body)

    # -- reads --------------------------------------------------------------------------
    def record(self, job_id: str) -> JobRecord | None:
        """The job record, built from its ``jobs`` row."""
        row = self._read(lambda conn: _first(
            conn, f"SELECT {', '.join(COLUMNS)} FROM jobs WHERE id = ?", (job_id,)))
        return None if row is None else row_record(job_id, COLUMNS, row)

    def now_ms(self) -> int:
        """This host's clock, which every process using the file shares."""
        return _now_ms()

    def close(self) -> None:
        """Close the connection and the wake sockets (removing their files)."""
        if self._pid != os.getpid():
            self._reset_process_state()
            return
        with self._lock:
            for sock, path in self._waiters:
                with contextlib.suppress(OSError):
                    sock.close()
                with contextlib.suppress(OSError):
                    os.unlink(path)
                _OWN_SOCKETS.discard(path)
            if self._sender is not None:
                self._sender.close()
            if self._dir_fd is not None:
                with contextlib.suppress(OSError):
                    os.close(self._dir_fd)
            if self._conn is not None:
                with contextlib.suppress(sqlite3.Error):
                    self._conn.close()
            self._reset_process_state()

    # -- the stored message and the counters ---------------------------------------------
    def raw_message(self, job_id: str) -> bytes | None:
        """The job's stored message, byte for byte."""
        row = self._read(lambda conn: _first(conn, "SELECT msg FROM jobs WHERE id = ?",
                                             (job_id,)))
        return None if row is None else _as_bytes(row[0])

    def stats(self) -> dict[str, int]:
        """Cluster counters (``meta`` rows ``stats:<name>``)."""
        rows = self._read(lambda conn: conn.execute(
            "SELECT key, value FROM meta WHERE key LIKE 'stats:%'").fetchall())
        return {str(key)[len("stats:"):]: int(value) for key, value in rows}
