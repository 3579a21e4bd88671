"""The durable store on PostgreSQL: ``plus+postgresql://user@host:5432/db`` (psycopg 3).

The Redis store (``lua/*.lua``) is the reference semantics: each state change here is ONE call
of a PL/pgSQL function of the store's schema (``sql/*.sql``, applied by
``migrations.py``), i.e. one transaction and one round trip, returning the same values as the
matching Lua script.

* Many hosts, one truth: times come from the database clock; claims read candidates with
  ``FOR UPDATE SKIP LOCKED`` (claimers never wait for, nor get, each other's jobs); unique
  holds are rows with a primary key taken by ``INSERT ... ON CONFLICT`` (two publishers on two
  hosts cannot both win); a concurrency group's slots are counted and taken under the group's
  advisory transaction lock (never oversubscribed).
* Idle consumers do not poll: :meth:`PostgresBackend.wait` LISTENs on a dedicated connection;
  publishes ``pg_notify`` inside their transaction, delivered when it commits. The timeout is
  only the fallback.
* Maintenance has a leader: the first worker to take ``pg_try_advisory_lock`` (on its own
  long-lived connection) runs recovery and pruning each interval; when it dies, its session
  ends, the lock frees, and the next worker's attempt takes over.
* Transactional enqueue: :meth:`PostgresBackend.publish_on` runs the publish on the CALLER's
  connection, inside their open transaction (see ``celery_plus.send.transactional``).
"""

from __future__ import annotations

import json
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from celery.exceptions import ImproperlyConfigured
from kombu.exceptions import ConnectionError as KombuConnectionError
from kombu.utils.url import maybe_sanitize_url

from celery_plus.model import rules
from celery_plus.model.details import encode_detail
from celery_plus.model.options import DEFAULT_OPTIONS, OptionsView, StoreOptions
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
from celery_plus.runtime.helper_threads import green_patcher
from celery_plus.runtime.throttled import Throttled
from celery_plus.settings import PlusConfig
from celery_plus.stores import sql_rates
from celery_plus.stores.postgres import arrays
from celery_plus.stores.postgres import migrations as pg_migrations
from celery_plus.stores.postgres import pool as pg_pool
from celery_plus.stores.postgres.bounds import (
    DEFAULT_BOUNDS,
    LinkBounds,
    check_alive,
    connect_timed_out,
    unanswered,
)
from celery_plus.stores.sql_record import COLUMNS, row_record
from celery_plus.stores.waiting import Due, wait_for_work

logger = logging.getLogger("celery_plus.transport.postgres")

T = TypeVar("T")

MAINTAIN_BATCH = 500
#: Attempts of a store call that hit a deadlock or serialization failure (then it raises).
RETRIES = 5
#: Attempts of a store call whose connection failed: a pool session the server ended
#: (restart, ``pg_terminate_backend``, idle timeout) fails once, then a fresh one is used.
CONNECTION_ATTEMPTS = 3
STATES = rules.STATES
#: Seconds a LISTEN connection may stay silent before it is checked with a statement (a link
#: stalled where the kernel cannot tell, e.g. behind a proxy, would otherwise stay silent).
LISTENER_CHECK_S = 30.0
#: Seconds that check waits for the reply (the waiting thread is blocked meanwhile).
LISTENER_CHECK_REPLY_S = 2.0
#: A record's select list: its ``jobs`` columns, the history read as text (not ``jsonb``).
RECORD_COLUMNS = ", ".join("history::text" if c == "history" else c for c in COLUMNS)

_PUBLISH_ARGS = ("%s, %s, %s, %s, %s::integer, %s::bigint, %s, %s, %s::bigint, %s, "
                 "%s::integer, %s::integer, %s::bigint, %s::bigint, %s, %s::integer, %s::bigint")
_PUBLISH = f"SELECT * FROM publish({_PUBLISH_ARGS})"
_PUBLISH_BATCH = (
    "SELECT * FROM publish_batch(%s::text[], %s::text[], %s::bytea[], %s::text[], "
    "%s::integer[], %s::bigint[], %s::text[], %s::text[], %s::bigint[], %s::text[], "
    "%s::integer[], %s::integer[], %s::bigint, %s::bigint[], %s::text[], %s::integer[], "
    "%s::bigint[])")
#: Milliseconds a shared publish transaction (group commit) waits for a lock before its
#: callers publish alone.
GROUP_LOCK_TIMEOUT = 100
_GROUP_LOCK_TIMEOUT = f"SET LOCAL lock_timeout = {GROUP_LOCK_TIMEOUT}"
_CLAIM = ("SELECT * FROM claim(%s::text[], %s, %s::integer, %s::integer, %s::bigint, "
          "%s::bigint, %s::text[], %s::bigint[], %s::text[], %s::text[], %s::bigint[])")
_SETTLE = ("SELECT * FROM settle(%s::text[], %s::bigint[], %s::text[], %s::text[], %s::bigint, "
           "%s::bigint[])")
_WORKER_BEAT = (
    "WITH beat AS (INSERT INTO workers (node, info, started_ms, at_ms) "
    "VALUES (%s, %s::jsonb, now_ms(), now_ms()) ON CONFLICT (node) DO UPDATE SET "
    "info = excluded.info, at_ms = excluded.at_ms, started_ms = CASE "
    "WHEN workers.info -> 'pid' = excluded.info -> 'pid' THEN workers.started_ms "
    "ELSE excluded.started_ms END RETURNING at_ms) "
    "DELETE FROM workers w USING beat WHERE w.at_ms < beat.at_ms - %s::bigint RETURNING w.node")
_READY = (
    "SELECT (SELECT j.queue FROM jobs j WHERE j.state = 'enqueued' "
    "AND j.queue = ANY (%s::text[]) AND j.queue NOT IN (SELECT queue FROM paused_queues) "
    "LIMIT 1), s.queue, s.due_ms - now_ms() "
    "FROM (SELECT 1) one LEFT JOIN LATERAL (SELECT j.queue, j.due_ms FROM jobs j "
    "WHERE j.state = 'scheduled' AND j.queue = ANY (%s::text[]) "
    "AND j.queue NOT IN (SELECT queue FROM paused_queues) ORDER BY j.due_ms LIMIT 1) s "
    "ON true")


def _as_bytes(value: str | bytes) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


def postgres_url(url: str) -> str:
    """The libpq URL of an inner ``postgresql://`` / ``postgres://`` broker URL."""
    scheme = url.partition("://")[0]
    if scheme not in ("postgresql", "postgres"):
        from celery.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(
            f"broker_url 'plus+{url}' is not a PostgreSQL URL; use "
            "plus+postgresql://user@host:5432/dbname.")
    return url


class _SharedLockWait(Exception):
    """A shared publish transaction waited too long for a lock (its callers go alone)."""


class StoreUnavailable(KombuConnectionError):
    """The database cannot be reached (a kombu connection error: Celery reconnects/retries)."""


#: Seconds after a WARNING of one kind (a stalled link, a refusal by SQLSTATE) during which
#: the next ones of that kind are logged at INFO: one stalled or read-only server hits every
#: connection of the process, and one line says so.
WARN_EVERY_S = 60.0
_warnings = Throttled(logger, WARN_EVERY_S, quiet_level=logging.INFO)
#: What :meth:`PostgresBackend.connect` finds of a database read-only for now.
READ_ONLY = "the database is read-only (transaction_read_only is on)"


def _log_stalled(what: str) -> None:
    """Log that PostgreSQL did not answer (one WARNING a while, else INFO)."""
    _warnings.warn("stalled", f"PostgreSQL did not answer ({what})")


def refused(exc: Exception | str, sqlstate: str | None = None) -> StoreUnavailable:
    """The store outage of a server that refuses writes for now: a read-only database or
    server (SQLSTATE 25006 ``read_only_sql_transaction``: a hot standby, a promoted-away
    primary, ``default_transaction_read_only``). A kombu connection error, as a lost server
    (``admin_shutdown`` and the other ``OperationalError`` replies already are: see
    :func:`_retrying`), logged once a while naming the reply. This is the one place the
    PostgreSQL store classifies such replies."""
    sqlstate = sqlstate or getattr(exc, "sqlstate", None) or "?"
    text = str(exc).strip()
    reply = text.splitlines()[0] if text else type(exc).__name__
    error = StoreUnavailable(f"PostgreSQL store refuses writes: {reply} (SQLSTATE {sqlstate}; "
                             "celery-plus waits and resumes by itself)")
    _warnings.warn(f"refused {sqlstate}", str(error))
    return error


def _retrying(step: Callable[[], T], renew: Callable[[], object] | None = None,
              stalled: Callable[[], object] | None = None) -> T:
    """Run ``step``, again when the server aborted it for a deadlock or serialization
    failure, or when its connection failed (after ``renew``, which gives up the pool of
    that connection, so a server restart costs one failed attempt, not one per pooled
    session, and an unreachable server fails fast).

    ``stalled``: called as well when the server did not answer a statement in time
    (``bounds.py``); a connection whose set-up timed out is not tried again (the server is
    unreachable now). Only a lost connection (``pg_pool.connection_lost``) is tried again; any other
    ``OperationalError`` (a cancelled statement, a resource limit such as "too many
    clients") leaves the pool alone. A store call that fails so, whose connection fails
    ``CONNECTION_ATTEMPTS`` times, or that finds no connection within the pool's timeout
    raises :class:`StoreUnavailable`, one of the transport's ``connection_errors`` (Celery
    reconnects, publishers retry). Every store call may run twice this way: settles,
    heartbeats and claims are fenced by lease token, and a repeated publish of a waiting
    job replaces its message.
    """
    import psycopg
    from psycopg import errors
    from psycopg_pool import PoolClosed, PoolTimeout

    attempt = failed_connections = 0
    while True:
        try:
            return step()
        except (errors.DeadlockDetected, errors.SerializationFailure):
            attempt += 1
            if attempt >= RETRIES:
                raise
            time.sleep(0.005 * attempt * (0.5 + random.random()))
        except errors.TransactionRollback:
            raise
        except errors.ReadOnlySqlTransaction as exc:
            raise refused(exc) from exc
        except PoolTimeout as exc:
            raise StoreUnavailable(f"PostgreSQL store unavailable: {exc}") from exc
        except psycopg.OperationalError as exc:
            failed_connections += 1
            if (failed_connections >= CONNECTION_ATTEMPTS or not pg_pool.connection_lost(exc)
                    or connect_timed_out(exc)):  # no answer to a new connection: down now
                raise StoreUnavailable(f"PostgreSQL store unavailable: {exc}") from exc
            if isinstance(exc, PoolClosed):  # another call retired the pool
                logger.debug("celery-plus: moving to a fresh PostgreSQL pool (%s)", exc)
            elif unanswered(exc):
                _log_stalled(f"{str(exc).strip()}; reconnecting on a fresh pool")
                if stalled is not None:
                    stalled()
            else:
                logger.info("celery-plus: PostgreSQL connection failed (%s); trying again",
                            str(exc).strip())
            if renew is not None:
                renew()
            time.sleep(0.05 * failed_connections)


class PostgresBackend(OptionsView, Backend):
    """Store operations on one schema of one PostgreSQL database (see the module docstring).

    Besides the shared ``options`` (whose ``prefix`` it ignores: one schema is one
    deployment): ``schema`` (the ``plus_pg_schema`` setting), ``connect`` (False: connect at
    the first call or at :meth:`connect`) and ``synchronous_commit``
    (``plus_pg_synchronous_commit``).
    """

    @classmethod
    def from_url(cls, url: str, config: PlusConfig, connection: Any = None) -> PostgresBackend:
        """The database at ``url``, in ``plus_pg_schema``, reached when first used (a server
        that is down is then a connection error kombu and Celery retry)."""
        pg_pool.require_psycopg()  # without the extra: how to install it, not an import error
        if green_patcher() == "eventlet":
            raise ImproperlyConfigured(
                f"broker_url 'plus+{maybe_sanitize_url(url)}' under eventlet: psycopg 3 does "
                "not cooperate with eventlet (its waits would block every green thread). Use "
                "-P gevent, -P threads or -P prefork with PostgreSQL, or a plus+redis:// store.")
        return cls(url, StoreOptions.of(config), schema=config.pg_schema, connect=False,
                   synchronous_commit=config.pg_synchronous_commit,
                   bounds=LinkBounds(config.pg_connect_timeout, config.pg_dead_link_timeout,
                                     config.pg_reply_timeout))


    def __init__(
        self,
        url: str,
        options: StoreOptions = DEFAULT_OPTIONS,
        *,
        schema: str = "celery_plus",
        connect: bool = True,
        synchronous_commit: str | None = None,
        bounds: LinkBounds = DEFAULT_BOUNDS,
    ) -> None:
        self.url = postgres_url(url)
        #: How long its connections may take to connect, notice a dead link, get a reply.
        self.bounds = bounds
        self.schema = pg_migrations.check_schema(schema)
        #: PostgreSQL's synchronous_commit on the pool's sessions (None: the server's).
        self.synchronous_commit = synchronous_commit
        self.qschema = pg_migrations.quoted(schema)
        #: The NOTIFY channel of this store's wake-ups.
        self.channel = f"plus.{schema}"
        self.options = options
        self._reset_process_state()
        pg_pool.on_fork(self)
        if connect:
            self.connect()

    def connect(self) -> None:
        """Open the pool (and migrate the schema): a wrong URL or a server that is down
        fails here, as :class:`StoreUnavailable` for the latter (the transport calls it when
        kombu connects, where connection errors are retried). A database that is read-only
        for now (a standby, ``default_transaction_read_only``) fails here too, as the store
        outage it is: Celery then reconnects with back-off instead of at once."""
        _retrying(self._pool, self._renew_pool)
        if self._rows("SELECT current_setting('transaction_read_only')")[0][0] == "on":
            raise refused(READ_ONLY, "25006")

    # -- per-process resources ----------------------------------------------------------
    def _reset_process_state(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._maint_lock = threading.Lock()
        self._engine: pg_pool.Engine | None = None
        self._maint_conn: Any = None
        #: True while this backend holds the maintenance leader lock.
        self.is_leader = False
        self._tls = threading.local()
        self._listeners: list[Any] = []

    def _after_fork(self) -> None:
        """In a forked child: drop (never close) the parent's private connections."""
        for conn in [*self._listeners, self._maint_conn]:
            if conn is not None:
                pg_pool.neutralize(conn)
        self._reset_process_state()

    def _current_engine(self) -> pg_pool.Engine:
        """The engine of this backend (acquired if need be), noted as the one the calling
        thread uses now: a failure of that thread's call retires that engine alone."""
        if self._pid != os.getpid():
            self._reset_process_state()
        self._tls.engine = None
        engine = self._engine
        if engine is None:
            with self._lock:
                if self._engine is None:
                    self._engine = pg_pool.acquire(self.url, self.schema,
                                                   self.synchronous_commit, self.bounds)
                engine = self._engine
        self._tls.engine = engine
        return engine

    def _pool(self) -> Any:
        return self._current_engine().pool

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """One statement on a pool connection (its own transaction); all its rows.

        The connection is taken and given back without the pool's ``connection()`` context:
        on an autocommit session its exit only asks for a commit with nothing to commit (the
        two cost 6.4 to 8.1 µs of CPU per call against 2.7 to 4.9 µs for ``getconn``/``putconn``);
        ``putconn`` still rolls back, or replaces, a connection left in a transaction or
        broken."""

        def run() -> list[Any]:
            pool = self._pool()
            conn = pool.getconn()
            try:
                return conn.execute(sql, params).fetchall()
            finally:
                pool.putconn(conn)

        return _retrying(run, self._renew_pool)

    def _renew_pool(self) -> None:
        """After a failed connection: give up the pool the failed call used
        (``pg_pool.retire``); the next call opens a fresh one. A thread whose call failed on
        a pool another thread has replaced since leaves the fresh one alone."""
        failed = getattr(self._tls, "engine", None)
        if failed is None:
            return
        with self._lock:
            dropped = self._engine is failed
            if dropped:
                self._engine = None
        pg_pool.retire(failed)
        if dropped:
            pg_pool.release(failed)

    def _one(self, sql: str, params: Sequence[Any] = ()) -> Any:
        rows = self._rows(sql, params)
        return rows[0] if rows else None

    def _value(self, sql: str, params: Sequence[Any] = ()) -> Any:
        row = self._one(sql, params)
        return None if row is None else row[0]

    # -- publishing ---------------------------------------------------------------------
    def _publish_params(self, job: NewJob) -> list[Any]:
        return [job.id, job.queue, _as_bytes(job.message), job.name, job.priority, job.eta_ms,
                job.unique_lock, job.unique_window, job.unique_ttl_ms, job.concurrency_group,
                job.concurrency_limit, job.max_deliveries, self.backstop_ms, job.lease_token,
                job.rate_group, job.rate_limit, job.rate_window_ms]

    @staticmethod
    def _outcome(job: NewJob, row: Sequence[Any]) -> PublishOutcome:
        holder, state, continued, fenced = row
        if fenced:
            return PublishOutcome(False, job.id, holder_id=job.id, state=str(state),
                                  fenced=True)
        if holder is not None:
            return PublishOutcome(False, job.id, holder_id=str(holder))
        return PublishOutcome(True, job.id, state=str(state), continued=bool(continued))

    def publish(self, job: NewJob) -> PublishOutcome:
        """Store one message as a job, deciding uniqueness atomically (publish.lua).

        Returns once the job is committed. Threads of this process publishing at the same
        time share one transaction and one commit (``pg_pool.GroupCommit``; not under
        gevent/eventlet); when a shared transaction fails (or waits for a lock longer than
        :data:`GROUP_LOCK_TIMEOUT`), each of its callers publishes its job alone, so an error
        reaches only the caller whose job caused it."""
        params = self._publish_params(job)
        group = _retrying(self._current_engine, self._renew_pool).publishes
        row: Any = pg_pool.ALONE if group is None else group.submit(params, self._publish_rows)
        if row is pg_pool.ALONE:
            row = self._one(_PUBLISH, params)
        return self._outcome(job, row)

    def _publish_rows(self, batch: Sequence[Sequence[Any]]) -> list[Any]:
        """The ``publish`` rows of ``batch`` (parameter lists), committed in one transaction
        (one ``publish_batch`` statement: the same outcomes as ``publish`` for each in turn);
        ``ALONE`` for each if that transaction failed for another reason than the connection
        (a lock wait longer than :data:`GROUP_LOCK_TIMEOUT` included: the lock may be held by
        one of these callers' own open transaction)."""
        if len(batch) == 1:
            return [self._one(_PUBLISH, batch[0])]
        from psycopg import errors

        def run() -> list[Any]:
            with self._pool().connection() as conn, conn.transaction():
                try:
                    with conn.pipeline():
                        conn.execute(_GROUP_LOCK_TIMEOUT)
                        cursor = conn.execute(_PUBLISH_BATCH, self._batch_arrays(batch))
                except errors.LockNotAvailable as exc:  # not a connection failure
                    raise _SharedLockWait() from exc
                by_ord = {int(row[0]): row[1:] for row in cursor.fetchall()}
                return [by_ord[i] for i in range(1, len(batch) + 1)]

        try:
            return _retrying(run, self._renew_pool)
        except StoreUnavailable:
            raise
        except Exception:
            logger.debug("celery-plus: a group commit of %d jobs failed; each is published "
                         "alone", len(batch), exc_info=True)
        return [pg_pool.ALONE] * len(batch)

    def _batch_params(self, jobs: Sequence[NewJob]) -> list[Any]:
        """``publish_batch``'s arguments for ``jobs``."""
        return self._batch_arrays([self._publish_params(job) for job in jobs])

    @staticmethod
    def _batch_arrays(batch: Sequence[Sequence[Any]]) -> list[Any]:
        """``publish_batch``'s arguments: those of ``publish`` (a parameter list per job, as
        :meth:`_publish_params` makes them), one array literal per argument."""
        cols = list(zip(*batch, strict=True))
        text, num = arrays.text_array, arrays.int_array
        return [text(cols[0]), text(cols[1]), arrays.bytea_array(cols[2]), text(cols[3]),
                num(cols[4]), num(cols[5]), text(cols[6]), text(cols[7]), num(cols[8]),
                text(cols[9]), num(cols[10]), num(cols[11]), cols[12][0], num(cols[13]),
                text(cols[14]), num(cols[15]), num(cols[16])]

    def publish_many(self, jobs: Sequence[NewJob]) -> list[PublishOutcome]:
        """Publish several jobs in one transaction and one statement; outcomes in order.

        One ``publish_batch`` call: the plain jobs (no key, group or lease token; new ids) are
        stored by one ``INSERT``, the others by ``publish`` each, in order."""
        if not jobs:
            return []
        params = self._batch_params(jobs)
        rows = self._rows(_PUBLISH_BATCH, params)
        by_ord = {int(row[0]): row[1:] for row in rows}
        return [self._outcome(job, by_ord[i]) for i, job in enumerate(jobs, start=1)]

    def publish_on(self, conn: Any, job: NewJob) -> PublishOutcome:
        """Publish with the CALLER's DB-API connection, in their open transaction.

        Nothing is committed here: the job (and its unique hold) exists once the caller
        commits, and its wake-up is delivered then; a rollback leaves nothing behind.
        """
        cursor = conn.cursor()
        try:
            cursor.execute(f"SELECT * FROM {self.qschema}.publish({_PUBLISH_ARGS})",
                           self._publish_params(job))
            row = cursor.fetchone()
        finally:
            cursor.close()
        return self._outcome(job, row)

    # -- consuming ----------------------------------------------------------------------
    @staticmethod
    def _settle_arrays(settles: Sequence[Settle]) -> list[str]:
        """``settle()``'s arrays (ids, tokens, actions, details, run times) as literals: a
        claim carries them on every call of a drain, and psycopg's adaptation of lists cost
        more of a solo worker's time than anything else of the claim's in Python (py-spy)."""
        text, num = arrays.text_array, arrays.int_array
        return [text([s.job_id for s in settles]), num([s.token for s in settles]),
                text([s.action for s in settles]),
                text([encode_detail(s.detail) for s in settles]),
                num([s.run_ms for s in settles])]

    def claim(
        self,
        queues: Sequence[str],
        worker_id: str,
        max_jobs: int,
        settles: Sequence[Settle] = (),
    ) -> ClaimResult:
        """Apply ``settles``, then take up to ``max_jobs`` jobs, in one transaction."""
        rows = self._rows(_CLAIM, [
            arrays.text_array(queues), worker_id, max_jobs, max(self.scan_limit, 4 * max_jobs),
            self.lease_ms, self.backstop_ms, *self._settle_arrays(settles)])
        result = ClaimResult()
        for kind, job_id, token, msg, deliveries, queue in rows:
            if kind == "c":
                result.claims.append(Claim(job_id, int(token), bytes(msg), int(deliveries),
                                           queue))
            elif kind == "b":
                result.blocked.append(job_id)
            elif kind == "d":
                result.dead_lettered.append((job_id, queue))
            elif kind == "n":
                result.next_due = int(token) / 1000.0
        return result

    def claim_job(self, job_id: str, worker_id: str) -> JobClaim:
        """Claim one waiting job by id (``claim_job()``, migration 0003)."""
        outcome, state, token, deliveries, left = self._one(
            "SELECT * FROM claim_job(%s, %s, %s::bigint, %s::bigint)",
            [job_id, worker_id, self.lease_ms, self.backstop_ms])
        return JobClaim(str(outcome), str(state), int(token), int(deliveries), int(left))

    def settle(self, settles: Sequence[Settle]) -> list[tuple[str, str]]:
        """End claims, fenced by (id, token); returns the dead-lettered (id, reason) pairs."""
        if not settles:
            return []
        ids, tokens, actions, details, run_ms = self._settle_arrays(settles)
        rows = self._rows(_SETTLE, [ids, tokens, actions, details, self.backstop_ms, run_ms])
        return [(str(job_id), str(reason)) for job_id, reason in rows]

    def heartbeat(self, held: Sequence[tuple[str, int]],
                  starts: Sequence[int | None] | None = None) -> list[Verdict]:
        """Renew the leases of claims still ours; one verdict per claim, in order
        (``heartbeat_verdicts()`` answers for the claims not renewed only); a renewed
        claim's start mark applied (``mark_start()``)."""
        if not held:
            return []
        rows = self._rows(
            "SELECT * FROM heartbeat_verdicts(%s::text[], %s::bigint[], %s::bigint, "
            "%s::bigint[])",
            [[job_id for job_id, _ in held], [int(t) for _, t in held], self.lease_ms,
             None if starts is None else list(starts)])
        verdicts = [Verdict.RENEWED] * len(held)
        for n, verdict in rows:
            verdicts[int(n) - 1] = Verdict(str(verdict))
        return verdicts

    def recover(self, limit: int = 100) -> list[Recovered]:
        """Return claims whose stored lease deadline passed (recover.lua)."""
        rows = self._rows("SELECT * FROM recover(%s::integer, %s::bigint)",
                          [limit, self.backstop_ms])
        return [Recovered(str(job_id), str(outcome)) for job_id, outcome in rows]

    # -- maintenance and its leader -----------------------------------------------------
    def maintain(self, worker_id: str) -> bool:
        """Run housekeeping if this interval's pass is due here. True if it ran.

        The leader (holder of the schema's maintenance advisory lock) runs it once per
        interval; another worker only when the leader missed two intervals (alive but stuck).
        """
        if self._pid != os.getpid():
            self._reset_process_state()
        comp_ret, comp_max, dead_ret, dead_max = self.retention
        with self._maint_lock:

            def run() -> Any:
                conn = self._maintenance_connection()
                if not self.is_leader:
                    self.is_leader = bool(conn.execute(
                        "SELECT pg_try_advisory_lock(hashtextextended(%s, 0))",
                        [f"celery_plus.maintain:{self.schema}"]).fetchone()[0])
                    if self.is_leader:
                        logger.info("celery-plus: %s is the maintenance leader of schema %s",
                                    worker_id, self.schema)
                return conn.execute(
                    "SELECT m.*, CASE WHEN m.o_ran THEN renew_holds(%s::integer, %s::bigint, "
                    "%s) END, CASE WHEN m.o_ran THEN maintain_rates(%s::integer) END "
                    "FROM maintain(%s, %s::bigint, %s::integer, %s::bigint, "
                    "%s::bigint, %s::bigint, %s::bigint) m",
                    [MAINTAIN_BATCH, self.backstop_ms, self.renews_waiting_holds, MAINTAIN_BATCH,
                     self.is_leader, self.maintenance_interval_ms, MAINTAIN_BATCH, comp_ret,
                     comp_max, dead_ret, dead_max]).fetchone()

            try:
                # A private connection that stalled: the pool's links likely did too.
                row = _retrying(run, stalled=self._renew_pool)
            except Exception:
                conn = self._maint_conn
                if conn is not None and (conn.closed or conn.broken):
                    self._drop_maintenance_connection()  # its session (and lock) is gone
                raise
        return bool(row[0])

    def _maintenance_connection(self) -> Any:
        conn = self._maint_conn
        if conn is None or conn.closed or conn.broken:
            self.is_leader = False
            conn = self._maint_conn = pg_pool.connect(self.url, self.schema, self.bounds)
        return conn

    def _drop_maintenance_connection(self) -> None:
        conn, self._maint_conn = self._maint_conn, None
        self.is_leader = False
        if conn is not None:
            try:
                conn.close()  # ends the session: the leader lock is released with it
            except Exception as exc:
                logger.debug("celery-plus: closing the maintenance connection: %r", exc)

    def rate_started(self, job_id: str, token: int) -> None:
        self._rows("SELECT rate_start(%s, %s::bigint)", [job_id, int(token)])

    # -- leases of roles and periodic schedules (migration 0006) --------------------------
    def lead(self, role: str, holder: str, ttl_ms: int) -> bool:
        return bool(self._value("SELECT lead(%s, %s, %s::bigint)",
                                [role, holder, max(int(ttl_ms), 1)]))

    def resign(self, role: str, holder: str) -> None:
        self._rows("DELETE FROM leases WHERE role = %s AND holder = %s RETURNING role",
                   [role, holder])

    def role_holder(self, role: str) -> tuple[str, int] | None:
        rows = self._rows("SELECT holder, expires_ms FROM leases "
                          "WHERE role = %s AND expires_ms >= now_ms()", [role])
        return (str(rows[0][0]), int(rows[0][1])) if rows else None

    def schedule_register(self, name: str, last_due_ms: int, task: str = "",
                          schedule: str = "") -> ScheduleRecord:
        return schedule_record(self._one(
            "INSERT INTO schedules AS s (name, last_due_ms, task, schedule) "
            "VALUES (%s, %s, %s, %s) ON CONFLICT (name) DO UPDATE SET task = excluded.task, "
            f"schedule = excluded.schedule RETURNING {SCHEDULE_COLUMNS}",
            [name, int(last_due_ms), task, schedule]))

    def schedule_fire(self, name: str, expected_last_ms: int, due_ms: int, next_ms: int,
                      job: NewJob | None) -> str:
        params = (self._publish_params(job) if job is not None
                  else ["", "", b"", "", 0, 0, "", "", 0, "", 0, 0, 0, 0, "", 0, 0])
        return str(self._value(
            f"SELECT fire(%s, %s::bigint, %s::bigint, %s::bigint, %s, {_PUBLISH_ARGS})",
            [name, int(expected_last_ms), int(due_ms), int(next_ms), job is not None,
             *params]))

    def schedules(self) -> list[ScheduleRecord]:
        return [schedule_record(row) for row in self._rows(
            f"SELECT {SCHEDULE_COLUMNS} FROM schedules ORDER BY name")]

    def schedule_pause(self, name: str, paused: bool) -> bool:
        return bool(self._rows("UPDATE schedules SET paused = %s WHERE name = %s "
                               "RETURNING name", [paused, name]))

    def schedule_delete(self, name: str) -> bool:
        return bool(self._rows("DELETE FROM schedules WHERE name = %s RETURNING name", [name]))

    def queue_pause(self, queue: str, paused: bool) -> int:
        """Pause or resume ``queue`` (``queue_pause()``); the database ms of the step."""
        return int(self._value("SELECT queue_pause(%s, %s)", [queue, paused]))

    def paused_queues(self) -> dict[str, int]:
        return {str(q): int(ms) for q, ms in
                self._rows("SELECT queue, paused_ms FROM paused_queues")}

    def worker_beat(self, beat: WorkerBeat) -> None:
        """One statement: the record upserted (``started_ms`` kept for the same pid), and
        records with no beat for ``WORKER_RECORD_KEEP_MS`` dropped."""
        self._rows(_WORKER_BEAT, [beat.node, json.dumps(beat.info()), WORKER_RECORD_KEEP_MS])

    def rate_usage(self) -> list[RateUsage]:
        return sql_rates.rate_usage(self._rows, self.now_ms(), "%s", "true")

    def worker_beats(self) -> list[WorkerBeat]:
        return [WorkerBeat.of(str(node), info, int(started), int(at)) for node, info, started, at
                in self._rows("SELECT node, info, started_ms, at_ms FROM workers ORDER BY node")]

    # -- idle wake-up -------------------------------------------------------------------
    def wait(
        self, queues: Sequence[str], transient: Sequence[str], timeout: float
    ) -> tuple[str, str, bytes | None] | None:
        """Block until durable work for ``queues`` or a message on ``transient`` queues.

        Returns ``("wake", queue, None)`` when a job of ``queues`` is ready (enqueued, or
        scheduled and due), ``("transient", queue, body)`` with a popped transient message,
        or None after ``timeout`` seconds. The LISTEN is in place before ready work is
        looked for, so a commit in between still wakes this wait; notifications for other
        queues do not end it.
        """
        if not queues and not transient:
            return None
        wanted = {f"q:{q}" for q in queues} | {f"t:{q}" for q in transient}
        listener = self._listener()

        def look() -> Due:
            nonlocal listener
            if listener is not None:
                listener = self._drain(listener)
            return self._due(queues)

        def block(pause: float) -> None:
            nonlocal listener
            if listener is None:
                time.sleep(min(pause, 0.5))  # no listener (connection trouble): poll
                listener = self._listener()
            else:
                listener = self._await(listener, pause, wanted)

        return wait_for_work(look, self.pop_transient, transient, block, timeout)

    def _listener(self) -> Any:
        """This thread's LISTEN connection (None while it cannot be opened)."""
        if self._pid != os.getpid():
            self._reset_process_state()
        conn = getattr(self._tls, "listener", None)
        if conn is not None and not conn.closed and not conn.broken:
            return conn
        try:
            conn = pg_pool.connect(self.url, self.schema, self.bounds)
            conn.execute(f'LISTEN "{self.channel}"')
            self._tls.listener_checked = time.monotonic()
        except Exception as exc:
            logger.warning("celery-plus: cannot LISTEN for wake-ups (polling): %r", exc)
            return None
        self._tls.listener = conn
        with self._lock:
            self._listeners.append(conn)
        return conn

    def _drain(self, conn: Any) -> Any:
        """Discard the notifications already received (ready work is looked for next); a
        listener silent for :data:`LISTENER_CHECK_S` is checked with a statement (bounded
        by the reply timeout)."""
        try:
            for _ in conn.notifies(timeout=0):
                pass
            if time.monotonic() - getattr(self._tls, "listener_checked", 0.0) > LISTENER_CHECK_S:
                check_alive(conn, LISTENER_CHECK_REPLY_S)  # a stalled one blocks briefly
                self._tls.listener_checked = time.monotonic()
        except Exception as exc:
            return self._lost_listener(conn, exc)
        return conn

    def _await(self, conn: Any, pause: float, wanted: set[str]) -> Any:
        """Block up to ``pause`` seconds for a notification naming one of ``wanted``."""
        end = time.monotonic() + pause
        try:
            while True:
                left = end - time.monotonic()
                if left <= 0:
                    return conn
                for note in conn.notifies(timeout=left, stop_after=1):
                    if note.payload in wanted:
                        return conn
        except Exception as exc:
            return self._lost_listener(conn, exc)

    def _lost_listener(self, conn: Any, exc: Exception) -> None:
        if unanswered(exc):
            _log_stalled(f"{str(exc).strip()}; the wake-up connection reconnects")
        else:
            logger.warning("celery-plus: wake-up connection lost (%r); reconnecting", exc)
        self._tls.listener = None
        with self._lock:
            if conn in self._listeners:
                self._listeners.remove(conn)
        try:
            conn.close()
        except Exception as close_exc:
            logger.debug("celery-plus: closing a broken listener: %r", close_exc)
        return None

    def _due(self, queues: Sequence[str]) -> Due:
        """What ``queues`` hold now (:class:`~celery_plus.stores.waiting.Due`), one query."""
        if not queues:
            return Due()
        ready, scheduled, due_ms = self._one(_READY, [list(queues), list(queues)])
        return Due(ready, scheduled, None if scheduled is None else int(due_ms) / 1000.0)

    # -- transient messages (remote control, replies, events) ---------------------------
    def push_transient(self, queue: str, message: bytes | str) -> None:
        """Append to a transient queue; the queue expires 300 s after its last push."""
        self._rows("SELECT push_transient(%s, %s)", [queue, _as_bytes(message)])

    def pop_transient(self, queue: str) -> bytes | None:
        body = self._value("SELECT pop_transient(%s)", [queue])
        return None if body is None else bytes(body)

    def transient_size(self, queue: str) -> int:
        return int(self._value(
            "SELECT count(*) FROM transient WHERE queue = %s AND expires_ms >= now_ms()",
            [queue]))

    def purge_transient(self, queue: str) -> int:
        return int(self._value(
            "WITH gone AS (DELETE FROM transient WHERE queue = %s RETURNING expires_ms) "
            "SELECT count(*) FILTER (WHERE expires_ms >= now_ms()) FROM gone", [queue]))

    def scheduled_jobs(self, queues: Sequence[str], limit: int = 1000) -> list[ScheduledJob]:
        if not queues:
            return []
        rows = self._rows(
            "SELECT id, queue, due_ms, msg FROM jobs WHERE state = 'scheduled' "
            "AND queue = ANY(%s) ORDER BY due_ms, id LIMIT %s", [list(queues), limit])
        return [ScheduledJob(r[0], r[1], int(r[2]), bytes(r[3])) for r in rows]

    def bind(self, exchange: str, binding: str, ttl_ms: int = 0) -> None:
        self._rows("SELECT bind(%s, %s, %s)", [exchange, binding, int(ttl_ms)])

    def unbind(self, exchange: str, binding: str) -> None:
        self._rows("SELECT unbind(%s, %s)", [exchange, binding])

    def bindings(self, exchange: str) -> list[str]:
        return [row[0] for row in self._rows("SELECT live_bindings(%s)", [exchange])]

    def mark_transient(self, queue: str, ttl_ms: int) -> None:
        self._rows("SELECT mark_transient(%s, %s)", [queue, int(ttl_ms)])

    def is_marked_transient(self, queue: str) -> bool:
        return self._one("SELECT 1 FROM transient_marks WHERE queue = %s "
                         "AND expires_ms >= now_ms()", [queue]) is not None

    # -- queue management ---------------------------------------------------------------
    def size(self, queue: str) -> int:
        """Number of enqueued jobs of ``queue``."""
        return int(self._value(
            "SELECT count(*) FROM jobs WHERE state = 'enqueued' AND queue = %s", [queue]))

    def purge(self, queue: str) -> int:
        """Delete the jobs waiting in ``queue`` and release their holds (as ``purge.lua``)."""
        return int(self._value("SELECT purge(%s)", [queue]))

    # -- reads --------------------------------------------------------------------------
    def record(self, job_id: str) -> JobRecord | None:
        """The job record, built from its ``jobs`` row."""
        row = self._one(f"SELECT {RECORD_COLUMNS} FROM jobs WHERE id = %s", [job_id])
        return None if row is None else row_record(job_id, COLUMNS, row)

    def raw_message(self, job_id: str) -> bytes | None:
        """The job's stored message, byte for byte."""
        value = self._value("SELECT msg FROM jobs WHERE id = %s", [job_id])
        return None if value is None else bytes(value)

    def stats(self) -> dict[str, int]:
        """Cluster counters: deduplicated, recovered, dead_lettered, blocked (absent = 0)."""
        return {str(name): int(total) for name, total in self._rows(
            "SELECT name, sum(n) FROM stats GROUP BY name")}

    def now_ms(self) -> int:
        """The database's clock: what leases, holds and ETAs are timed by."""
        return int(self._value("SELECT now_ms()"))

    def close(self) -> None:
        """Close this backend's connections; its share of the process's pool is released.

        The leader lock goes with the maintenance connection's session. In a forked child
        nothing inherited is closed (see ``pool.py``).
        """
        if self._pid != os.getpid():
            self._after_fork()
            return
        with self._maint_lock:
            self._drop_maintenance_connection()
        with self._lock:
            listeners, self._listeners = self._listeners, []
            engine, self._engine = self._engine, None
        self._tls = threading.local()
        for conn in listeners:
            try:
                conn.close()
            except Exception as exc:
                logger.debug("celery-plus: closing a listener: %r", exc)
        if engine is not None:
            pg_pool.release(engine)
