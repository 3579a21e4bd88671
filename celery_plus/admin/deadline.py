"""A deadline on each dashboard request, on the store calls it makes and the queries they run.

:func:`bounded` marks the thread answering a request with when it must be done by and how to
tell that its client has gone (waitress's ``waitress.client_disconnected``). The whole request
has that one deadline, on every store:

* **between store calls**: a bulk action (each batch), a text search or another read made of
  several calls (each chunk) passes a :func:`~celery_plus.model.checkpoint.checkpoint`, where
  :func:`check` raises :class:`Stopped` once the deadline passed or the client left;
* **inside one SQLite statement**: a progress handler on the store's connection
  (:func:`bind`) interrupts it (``sqlite3.OperationalError: interrupted``), checked every
  :data:`SQLITE_STEPS` virtual-machine steps;
* **inside one PostgreSQL statement**: ``celery-plus admin`` starts with ``statement_timeout``
  (the request's deadline) for every statement of its process (:func:`postgres_options`,
  ``PGOPTIONS``); a client that leaves is seen at the next checkpoint;
* **inside one Redis call**: not interrupted (each is bounded: a page, a chunk of records, a
  batch); the next checkpoint stops the work.

A bulk action that stops says what it did (:func:`reporting`: ``BulkResult.stopped`` and the
counts so far; each batch is one atomic step, the rest are untouched); the dashboard answers
``503`` with :func:`why` (the deadline of N s passed, or the client left).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from celery_plus.model.admin import BulkResult
from celery_plus.model.checkpoint import watching

#: Seconds a request may run (its queries included).
REQUEST_DEADLINE = 30.0
#: SQLite virtual-machine steps between two looks at the deadline.
SQLITE_STEPS = 1_000


@dataclass(frozen=True)
class Deadline:
    """When the current request must be done by (``time.monotonic()``), and whether its
    client has gone."""

    expires: float
    gone: Callable[[], bool] | None = None
    #: The seconds it was given (what a stopped request says).
    seconds: float = REQUEST_DEADLINE

    def reason(self) -> str | None:
        """Why the request has to stop now (its deadline passed, its client left), or
        None."""
        if time.monotonic() > self.expires:
            return f"the request's deadline of {_seconds(self.seconds)} passed"
        try:
            left = bool(self.gone is not None and self.gone())
        except Exception:  # (a server's check that fails says nothing)
            left = False
        return "the client left (closed the connection)" if left else None

    def over(self) -> bool:
        return self.reason() is not None


class Stopped(Exception):
    """The request's work stopped at a checkpoint: ``reason`` says why; ``result`` what a bulk
    action did before (:func:`reporting`)."""

    def __init__(self, reason: str, result: BulkResult | None = None) -> None:
        super().__init__(reason)
        self.reason, self.result = reason, result


#: A bulk action's verb, done.
DONE = {"retry": "retried", "discard": "discarded", "cancel": "canceled", "purge": "purged"}


def stopped_text(exc: Stopped) -> str:
    """What a stopped request says: why, and what a bulk action did before it stopped."""
    text = f"stopped: {exc.reason}"
    result = exc.result
    if result is None:
        return f"{text}; narrow the request (a filter, a time range) and try again"
    text += (f"; {DONE.get(result.action, result.action)} {len(result.changed)} jobs "
             "before that")
    if result.conflicts:
        text += f" ({len(result.conflicts)} not retried: their unique key is held)"
    return (f"{text}. The other matches are untouched (each batch of a bulk action is done "
            "whole or not at all): run it again for the rest, or narrow it")


def _seconds(value: float) -> str:
    return f"{value:.0f} s" if value >= 10 else f"{value:.3g} s"


_current: contextvars.ContextVar[Deadline | None] = contextvars.ContextVar(
    "celery_plus_admin_deadline", default=None)


@contextlib.contextmanager
def bounded(seconds: float, gone: Callable[[], bool] | None = None) -> Iterator[Deadline]:
    """Run the block as one request with a deadline ``seconds`` from now."""
    deadline = Deadline(time.monotonic() + seconds, gone, seconds)
    token = _current.set(deadline)
    try:
        with watching(check):
            yield deadline
    finally:
        _current.reset(token)


def why() -> str | None:
    """Why the current request has to stop (see :meth:`Deadline.reason`); None: it goes on
    (or no request is running)."""
    deadline = _current.get()
    return None if deadline is None else deadline.reason()


def expired() -> bool:
    """Whether the current request is past its deadline or its client has gone."""
    return why() is not None


def check() -> None:
    """Raise :class:`Stopped` if the current request has to stop (a checkpoint's check)."""
    reason = why()
    if reason is not None:
        raise Stopped(reason)


@contextlib.contextmanager
def reporting(result: BulkResult) -> Iterator[BulkResult]:
    """Run a bulk action that fills ``result`` batch by batch: stopped by the request's
    deadline or its client leaving (at a checkpoint, or a statement interrupted meanwhile),
    ``result.stopped`` says why and :class:`Stopped` carries ``result``."""
    try:
        yield result
    except Exception as exc:
        reason = exc.reason if isinstance(exc, Stopped) else why()
        if reason is None:
            raise
        result.stopped = reason
        raise Stopped(reason, result) from exc


def _sqlite_progress() -> int:
    """SQLite's progress handler: non-zero interrupts the running statement."""
    return 1 if expired() else 0


def bind(store: Any) -> None:
    """Bound the queries of an admin store: the progress handler on a SQLite store's
    connection (other stores: see the module docstring)."""
    backend = getattr(store, "backend", None)
    connection = getattr(backend, "_connection", None)
    lock = getattr(backend, "fork_lock", None)
    if connection is None or lock is None or not hasattr(backend, "path"):
        return
    with lock():
        conn = connection()
        if isinstance(conn, sqlite3.Connection):
            conn.set_progress_handler(_sqlite_progress, SQLITE_STEPS)


def postgres_options(seconds: float = REQUEST_DEADLINE) -> None:
    """Give every PostgreSQL statement of this process a ``statement_timeout`` (through
    ``PGOPTIONS``, which libpq reads; one already set there is kept)."""
    current = os.environ.get("PGOPTIONS", "")
    if "statement_timeout" not in current:
        os.environ["PGOPTIONS"] = (
            f"{current} -c statement_timeout={round(seconds * 1000)}").strip()
