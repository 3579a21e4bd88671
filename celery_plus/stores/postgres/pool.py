"""Connections of the PostgreSQL store: one shared pool per (URL, schema) and process.

kombu opens a transport (hence a backend) per broker connection, and Celery keeps several
(producer pool, consumer, remote control), so backends of one process share a
``psycopg_pool.ConnectionPool`` (reference counted, closed with its last backend). Pool
connections are in autocommit mode with ``search_path`` set to the store's schema: each store
function call is its own transaction. The schema is migrated once, when a process first opens
a pool for it.

Fork safety: a forked child (prefork pool processes) must never use, nor close, the parent's
connections — closing one sends a Terminate message on the parent's socket. After a fork, every
inherited connection's socket is replaced by ``/dev/null`` (so nothing the child does can reach
the parent's sessions), and the child opens its own pool on first use.
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any

from celery_plus.runtime.helper_threads import green_patcher, signals_blocked
from celery_plus.stores.postgres import migrations as pg_migrations
from celery_plus.stores.postgres.bounds import DEFAULT_BOUNDS, LinkBounds, connection_class

#: Largest number of connections of one process's pool for one store.
POOL_MAX = 8
#: Seconds a caller waits for a free pool connection before an error.
POOL_TIMEOUT = 30.0
#: Seconds a pool goes on failing to connect before it is retired (:func:`retire`): its
#: callers then fail at once, and the next call opens a fresh pool, which connects as soon
#: as the server is back instead of after the pool's own backoff (1, 2, 4… s).
RECONNECT_TIMEOUT = 1.0
#: Seconds closing a retired pool waits for its worker threads to stop.
CLOSE_WAIT_S = 1.0
#: Most publishes one group commit takes (the rest wait for the next one).
GROUP_MAX = 100

_lock = threading.Lock()
_engines: dict[tuple[str, str, str | None, LinkBounds], Engine] = {}
#: Objects inherited from the parent process: kept referenced, never used or closed.
_orphans: list[Any] = []
#: Callbacks run in a forked child (backends drop their private connections).
_fork_hooks: weakref.WeakSet[Any] = weakref.WeakSet()


def require_psycopg() -> None:
    try:
        import psycopg  # noqa: F401
        import psycopg_pool  # noqa: F401
    except ImportError as exc:
        from celery.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(
            "The plus+postgresql:// transport needs psycopg 3 and psycopg-pool: "
            "pip install 'celery-plus[postgres]'.") from exc


#: SQLSTATEs of a session the server ended: admin, crash or idle-session shutdown, or a
#: server not accepting connections yet (class 08, connection exceptions, counts too).
_SESSION_ENDED = frozenset({"57P01", "57P02", "57P03", "57P05"})


def connection_lost(exc: BaseException) -> bool:
    """Whether a psycopg error means the connection is gone (the server is unreachable,
    restarted or ended the session, or the pool was retired), not that a statement failed
    on a live session (a cancelled query, a lock or resource limit)."""
    from psycopg_pool import PoolClosed

    if isinstance(exc, PoolClosed):
        return True
    state = getattr(exc, "sqlstate", None)
    return state is None or state.startswith("08") or state in _SESSION_ENDED


def neutralize(conn: Any) -> None:
    """Point an inherited connection's socket at /dev/null (its session is the parent's)."""
    try:
        fd = conn.pgconn.socket
    except Exception:
        return
    null = os.open(os.devnull, os.O_RDWR)
    try:
        os.dup2(null, fd)
    except OSError:
        pass
    finally:
        os.close(null)
    _orphans.append(conn)


def connect(url: str, schema: str, bounds: LinkBounds = DEFAULT_BOUNDS) -> Any:
    """A private autocommit connection with ``search_path`` set to ``schema``, bounded in
    time by ``bounds``."""
    conn = connection_class(bounds.reply_timeout).connect(
        url, autocommit=True, **bounds.libpq_params(url))
    try:
        conn.execute(f"SET search_path TO {pg_migrations.quoted(schema)}")
    except BaseException:
        conn.close()
        raise
    return conn


#: Seconds a queued publish waits for a transaction to take it before it starts one itself
#: (a transaction in flight may wait for a lock that its caller's own open transaction holds).
GROUP_PATIENCE = 0.25
#: An item's result when the shared transaction failed: its caller publishes it alone.
ALONE = object()


class _Waiting:
    """One caller's item in a :class:`GroupCommit`: its outcome, or its turn to lead."""

    __slots__ = ("done", "error", "item", "ready", "result", "taken")

    def __init__(self, item: Any) -> None:
        self.item = item
        self.ready = threading.Event()
        self.taken = self.done = False
        self.result: Any = None
        self.error: BaseException | None = None


class GroupCommit:
    """Concurrent publishers of one process share a transaction and its commit.

    A caller that finds no transaction in flight runs its own at once (one publisher waits for
    nobody); callers that arrive while one is in flight queue up, and the first of them, once
    that transaction is over, takes every queued item (up to :data:`GROUP_MAX`) into the
    next one. A caller whose item no transaction took within :data:`GROUP_PATIENCE` seconds
    starts one itself, so a transaction stuck on a lock never holds up the others (the lock
    may be their own). Each caller returns only after the commit of its own item: ``run`` is
    given the items of one transaction and returns, per item, its result or the exception to
    raise in that item's caller.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: list[_Waiting] = []
        self._leaders = 0

    def queued(self) -> int:
        """How many callers wait for a transaction (not counting those in flight)."""
        with self._lock:
            return len(self._queue)

    def submit(self, item: Any, run: Callable[[Sequence[Any]], Sequence[Any]]) -> Any:
        me = _Waiting(item)
        with self._lock:
            lead = self._leaders == 0
            if lead:
                self._leaders += 1
            else:
                self._queue.append(me)
        while not lead:
            me.ready.wait(None if me.taken else GROUP_PATIENCE)
            with self._lock:
                if me.done:
                    break
                if not me.taken:  # promoted, or out of patience: lead a transaction
                    self._queue.remove(me)
                    self._leaders += 1
                    lead = True
                else:
                    me.ready.clear()
        if lead:
            try:
                with self._lock:
                    batch = [me, *self._queue[:GROUP_MAX - 1]]
                    del self._queue[:GROUP_MAX - 1]
                    for waiting in batch:
                        waiting.taken = True
                        waiting.ready.clear()
                self._run(batch, run)
            finally:
                with self._lock:
                    self._leaders -= 1
                    if self._queue and not self._leaders:  # the next caller leads
                        self._queue[0].ready.set()
        if me.error is not None:
            raise me.error
        return me.result

    def _run(self, batch: list[_Waiting], run: Callable[[Sequence[Any]], Sequence[Any]]) -> None:
        try:
            outcomes = list(run([w.item for w in batch]))
            if len(outcomes) != len(batch):
                raise RuntimeError(f"{len(outcomes)} outcomes for {len(batch)} items")
        except BaseException as exc:  # every caller of this transaction sees it
            outcomes = [exc] * len(batch)
        with self._lock:
            for waiting, outcome in zip(batch, outcomes, strict=True):
                if isinstance(outcome, BaseException):
                    waiting.error = outcome
                else:
                    waiting.result = outcome
                waiting.done = True
                waiting.ready.set()


class Engine:
    """A process's pool for one store, shared by its backends."""

    def __init__(self, url: str, schema: str, synchronous_commit: str | None = None,
                 bounds: LinkBounds = DEFAULT_BOUNDS) -> None:
        from psycopg_pool import ConnectionPool

        self.url = url
        self.schema = schema
        self.synchronous_commit = synchronous_commit
        self.bounds = bounds
        self.users = 0
        #: Set once by :func:`retire` (its pool is being closed).
        self.retired = False
        #: The publishes of this process's threads, committed together (``GroupCommit``);
        #: None under gevent/eventlet, whose locks belong to one OS thread's hub (each
        #: publish is then its own transaction, as before).
        self.publishes = None if green_patcher() else GroupCommit()
        self.conns: weakref.WeakSet[Any] = weakref.WeakSet()
        # A direct connection first: a wrong URL fails here with the server's own message.
        # It is not bounded in reply time (a migration may wait for another process's).
        with contextlib.closing(pg_migrations.connect(url, **bounds.libpq_params(url))) as conn:
            pg_migrations.migrate(conn, schema)
        # The pool's threads (a worker and a scheduler) are started with every signal
        # blocked: signals sent to this process must reach its main thread (helper_threads).
        with signals_blocked():
            self.pool = ConnectionPool(
                url, min_size=1, max_size=POOL_MAX, timeout=POOL_TIMEOUT, num_workers=1,
                connection_class=connection_class(bounds.reply_timeout),
                kwargs={"autocommit": True, **bounds.libpq_params(url)},
                configure=self._configure, open=True, name=f"celery-plus:{schema}",
                reconnect_timeout=RECONNECT_TIMEOUT, reconnect_failed=self._reconnect_failed)

    @property
    def key(self) -> tuple[str, str, str | None, LinkBounds]:
        return self.url, self.schema, self.synchronous_commit, self.bounds

    def _configure(self, conn: Any) -> None:
        conn.execute(f"SET search_path TO {pg_migrations.quoted(self.schema)}")
        if self.synchronous_commit is not None:  # one of PostgreSQL's own values (settings)
            conn.execute(f"SET synchronous_commit TO {self.synchronous_commit}")
        self.conns.add(conn)

    def _reconnect_failed(self, pool: Any) -> None:
        """The pool's worker could not connect for ``RECONNECT_TIMEOUT``: retire the pool if
        it has no connection left (a server that refuses only more connections, "too many
        clients", leaves a pool with connections: its callers wait for one of them)."""
        if not pool.get_stats().get("pool_size"):
            retire(self)

    def abandon(self) -> None:
        """In a forked child: cut every inherited connection off, keep the objects."""
        for conn in list(self.conns):
            neutralize(conn)
        _orphans.append(self.pool)


def acquire(url: str, schema: str, synchronous_commit: str | None = None,
            bounds: LinkBounds = DEFAULT_BOUNDS) -> Engine:
    """The process's engine for (url, schema, synchronous_commit, bounds), created (and the
    schema migrated) if needed."""
    require_psycopg()
    key = (url, schema, synchronous_commit, bounds)
    with _lock:
        engine = _engines.get(key)
        if engine is None:
            engine = Engine(url, schema, synchronous_commit, bounds)
            _engines[key] = engine
        engine.users += 1
        return engine


def release(engine: Engine) -> None:
    """One backend less on ``engine``; the pool is closed with its last user."""
    with _lock:
        engine.users -= 1
        if engine.users > 0 or engine.retired:  # a retired pool closes by itself
            return
        if _engines.get(engine.key) is engine:
            del _engines[engine.key]
    engine.pool.close()


def retire(engine: Engine) -> None:
    """``engine``'s server went away (a restart, terminated sessions): backends acquiring
    from now on get a fresh engine, which fails at once while the server is down and works
    as soon as it is back (a pool left to reconnect by itself backs off for longer and
    longer).

    The retired pool is closed at once: a caller waiting for one of its connections, or
    asking for one later (another backend still on this engine), fails with ``PoolClosed``
    and moves to the fresh engine, where it would otherwise wait for the old pool's backoff
    (up to ``POOL_TIMEOUT``) while the server is back: a lease keeper waiting so lets its
    leases lapse. Connections in use are closed as they are returned. The pool is closed
    in a thread of its own: closing waits for the pool's worker threads (one may be the
    caller, or be connecting)."""
    with _lock:
        if engine.retired:
            return
        engine.retired = True
        if _engines.get(engine.key) is engine:
            del _engines[engine.key]
    with signals_blocked():
        threading.Thread(target=engine.pool.close, kwargs={"timeout": CLOSE_WAIT_S},
                         daemon=True, name="celery-plus-pool-close").start()


def on_fork(owner: Any) -> None:
    """Call ``owner._after_fork()`` in a forked child (held weakly)."""
    _fork_hooks.add(owner)


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()
    for engine in list(_engines.values()):
        engine.abandon()
    _engines.clear()
    for owner in list(_fork_hooks):
        with contextlib.suppress(Exception):
            owner._after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)
