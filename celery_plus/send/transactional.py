"""Transactional enqueue: a job exists only if the caller's database transaction commits.

Two forms (``docs/postgres.md``):

* :func:`enqueue_in` — broker ``plus+postgresql://`` on the same database as the caller's data.
  Durable publishes inside the block are written with the CALLER's connection, in their open
  transaction: a rollback leaves no job and no unique hold; a commit makes the job visible and
  wakes workers (``NOTIFY`` is delivered at commit). Uniqueness is still decided at once, so
  ``delay()`` returns the holder's result for a duplicate, as always.

      with transaction.atomic():                  # Django
          with enqueue_in(connection):
              order = Order.objects.create(...)
              send_receipt.delay(order.pk)

      with conn.transaction(), enqueue_in(conn):  # psycopg 3
          conn.execute("INSERT INTO orders ...")
          send_receipt.delay(order_id)

* :func:`enqueue_after_commit` — any broker (Redis, SQLite, PostgreSQL elsewhere). Durable
  publishes inside the block are held back and published once the transaction commits
  (dropped when it rolls back). Results' ``.deduplicated`` is ``None`` until then. Targets:
  Django (``django.db.transaction`` or a connection: ``on_commit``), any ``on_commit``-style
  registrar callable, or a psycopg connection whose transaction ENDS inside the block.

Covers the "transactional enqueue" acceptance lines of the PostgreSQL backend issue.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from celery.exceptions import ImproperlyConfigured

from celery_plus.model.store import JobStore, NewJob, PublishOutcome
from celery_plus.transport.publishing import PublishBatch, current_batch, current_transaction

__all__ = ["enqueue_after_commit", "enqueue_in"]

#: libpq's PQTRANS_IDLE (no transaction open on the connection).
_IDLE = 0
#: SQLSTATEs of "the store's schema / functions are not on this database".
_NOT_HERE = {"3F000", "42883", "42P01"}


def driver_connection(conn: Any) -> Any:
    """The DB-API connection of ``conn``: Django's ``DatabaseWrapper`` is unwrapped
    (duck-typed: ``ensure_connection()`` then ``.connection``); others are used as given."""
    if hasattr(conn, "ensure_connection") and hasattr(conn, "connection"):
        conn.ensure_connection()
        conn = conn.connection
    if not callable(getattr(conn, "cursor", None)):
        raise TypeError(f"expected a psycopg connection (or Django's connection), got {conn!r}")
    return conn


def _in_transaction(conn: Any) -> bool:
    """True unless ``conn`` autocommits with no transaction open."""
    if not getattr(conn, "autocommit", False):
        return True
    info = getattr(conn, "info", None)
    return info is not None and int(info.transaction_status) != _IDLE


def _fetch_one(conn: Any, sql: str, params: tuple[Any, ...] = ()) -> Any:
    cursor = conn.cursor()
    try:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    finally:
        cursor.close()
    return None if row is None else row[0]


class InTransaction:
    """Writes durable publishes with the caller's connection (``current_transaction``)."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def publish(self, backend: JobStore, job: NewJob) -> PublishOutcome:
        publish_on = getattr(backend, "publish_on", None)
        if publish_on is None:
            raise ImproperlyConfigured(
                "enqueue_in() writes jobs in your database transaction, so it needs a "
                "plus+postgresql:// broker on that database; with another broker use "
                "celery_plus.enqueue_after_commit().")
        if not _in_transaction(self.conn):
            raise ImproperlyConfigured(
                "enqueue_in(): the connection is in autocommit mode with no transaction open, "
                "so the job would not wait for anything; open one first (Django: "
                "transaction.atomic(); psycopg: conn.transaction()).")
        try:
            outcome: PublishOutcome = publish_on(self.conn, job)
        except Exception as exc:
            if (getattr(exc, "sqlstate", None) or getattr(exc, "pgcode", None)) in _NOT_HERE:
                schema = getattr(backend, "schema", "?")
                raise ImproperlyConfigured(
                    f"enqueue_in(): the celery-plus store (schema {schema!r}) is not in the "
                    "database of this connection; the broker URL must name the same database "
                    "(run `celery-plus db migrate` there).") from exc
            raise
        return outcome


@contextmanager
def enqueue_in(conn: Any) -> Iterator[Any]:
    """Write durable publishes inside the block in ``conn``'s open transaction.

    ``conn``: a psycopg 3 connection (a psycopg2 one works too) or Django's
    ``django.db.connection``. Yields the driver connection. Needs a ``plus+postgresql://``
    broker whose database is the connection's.
    """
    raw = driver_connection(conn)
    token = current_transaction.set(InTransaction(raw))
    try:
        yield raw
    finally:
        current_transaction.reset(token)


class AfterCommitBatch(PublishBatch):
    """Durable publishes held back until a transaction commits.

    With a psycopg connection, the first publish notes the transaction's id
    (``txid_current()``), so the block's end can tell a commit from a rollback.
    """

    def __init__(self, conn: Any = None) -> None:
        super().__init__()
        self.conn = conn
        self.xid: int | None = None

    def add(self, backend: JobStore, job: NewJob) -> None:
        if self.conn is not None and self.xid is None:
            self.xid = int(_fetch_one(self.conn, "SELECT txid_current()"))
        super().add(backend, job)

    def publish(self) -> list[PublishOutcome]:
        """Store the held jobs; each result learns whether it was deduplicated."""
        outcomes = self.flush()
        for outcome in outcomes:
            watched = self.watched.get(outcome.job_id)
            if watched is None:
                continue
            result = watched[0]
            if outcome.accepted:
                result.deduplicated = False
            else:
                result.id = outcome.holder_id
                result.deduplicated = True
        return outcomes


def _registrar(target: Any) -> Callable[[Callable[[], Any]], Any] | None:
    """An ``on_commit(callback)`` function for ``target`` (None for a DB-API connection)."""
    if target is None:
        try:
            from django.db import transaction
        except ImportError as exc:
            raise ImproperlyConfigured(
                "enqueue_after_commit() without an argument uses Django's transaction."
                "on_commit; pass a connection or an on_commit-style function.") from exc
        on_commit: Callable[[Callable[[], Any]], Any] = transaction.on_commit
        return on_commit
    method = getattr(target, "on_commit", None)
    if callable(method):
        return method
    if callable(getattr(target, "cursor", None)):
        return None
    if callable(target):
        return target
    raise TypeError(f"enqueue_after_commit(): cannot register an after-commit action on "
                    f"{target!r}; pass Django's transaction / connection, an on_commit-style "
                    "function or a psycopg connection.")


def _outcome_of(conn: Any, xid: int) -> str:
    """'committed', 'aborted' or 'in progress' for transaction ``xid`` (seen from ``conn``)."""
    was_idle = int(conn.info.transaction_status) == _IDLE
    status = _fetch_one(conn, "SELECT txid_status(%s)", (xid,))
    if was_idle and not getattr(conn, "autocommit", False):
        conn.rollback()  # end the read-only transaction this query opened
    return str(status)


@contextmanager
def enqueue_after_commit(target: Any = None) -> Iterator[AfterCommitBatch]:
    """Hold durable publishes made in the block until the transaction commits.

    ``target``: Django's ``transaction`` module or a ``connection`` (``on_commit``), an
    ``on_commit(callback)``-style function, or a psycopg connection — then the transaction
    must end (commit or rollback) inside the block, and the jobs are published when the
    block exits after a commit. If the block raises, nothing is published.
    """
    register = _registrar(target)
    conn = driver_connection(target) if register is None else None
    batch = AfterCommitBatch(conn)
    token = current_batch.set(batch)
    try:
        yield batch
    finally:
        current_batch.reset(token)
    if not batch.jobs:
        return
    if register is not None:
        register(batch.publish)
        return
    if conn is None or batch.xid is None:  # pragma: no cover - add() notes it with a conn
        batch.publish()
        return
    if int(conn.info.transaction_status) != _IDLE:
        batch.jobs.clear()
        raise ImproperlyConfigured(
            "enqueue_after_commit(conn): the transaction is still open when the block ends; "
            "commit it inside the block (psycopg: `with conn.transaction():` or "
            "conn.commit()), or use Django's on_commit.")
    outcome = _outcome_of(conn, batch.xid)
    if outcome == "committed":
        batch.publish()
    else:
        batch.jobs.clear()
