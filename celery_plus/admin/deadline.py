"""A deadline on each dashboard request, and on the store queries it runs.

:func:`bounded` marks the thread answering a request with when it must be done by and how to
tell that its client has gone (waitress's ``waitress.client_disconnected``). The store
queries it runs stop once either happens:

* **SQLite**: a progress handler on the store's connection (:func:`bind`) interrupts the
  running statement (``sqlite3.OperationalError: interrupted``), checked every
  :data:`SQLITE_STEPS` virtual-machine steps;
* **PostgreSQL**: ``celery-plus admin`` starts with ``statement_timeout`` (the request's
  deadline) for every statement of its process (:func:`postgres_options`, ``PGOPTIONS``);
* **Redis**: not interrupted here: its listings read bounded pages and its text search is
  bounded unless ``search=all`` (docs/admin.md says what that costs).

The dashboard then answers ``503`` saying the request ran out of time (:func:`expired`).
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

    def over(self) -> bool:
        if time.monotonic() > self.expires:
            return True
        try:
            return bool(self.gone is not None and self.gone())
        except Exception:  # (a server's check that fails says nothing)
            return False


_current: contextvars.ContextVar[Deadline | None] = contextvars.ContextVar(
    "celery_plus_admin_deadline", default=None)


@contextlib.contextmanager
def bounded(seconds: float, gone: Callable[[], bool] | None = None) -> Iterator[Deadline]:
    """Run the block as one request with a deadline ``seconds`` from now."""
    deadline = Deadline(time.monotonic() + seconds, gone)
    token = _current.set(deadline)
    try:
        yield deadline
    finally:
        _current.reset(token)


def expired() -> bool:
    """Whether the current request is past its deadline or its client has gone."""
    deadline = _current.get()
    return deadline is not None and deadline.over()


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
