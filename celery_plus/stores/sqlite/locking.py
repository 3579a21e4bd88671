"""SQLite's "database is locked": the one rule for recognising it and waiting it out, used by
the store and by the result backend on the same file."""

from __future__ import annotations

import logging
import random
import sqlite3
import time
from collections.abc import Callable
from typing import TypeVar

logger = logging.getLogger("celery_plus.transport.sqlite")

T = TypeVar("T")


def is_locked(exc: BaseException) -> bool:
    """True for SQLite's transient "database is locked" / "busy" errors."""
    if not isinstance(exc, sqlite3.OperationalError):
        return False
    text = str(exc).lower()
    return "locked" in text or "busy" in text


def retry_while_locked(step: Callable[[], T], give_up_s: float,
                       fatal: Callable[[sqlite3.OperationalError], BaseException | None]
                       = lambda exc: None) -> T:
    """Run ``step``, again and again while the database is locked, with jittered backoff, for
    at most ``give_up_s``. An error ``fatal`` turns into an exception is raised as that, at
    once; any other error, or a lock that outlasts ``give_up_s``, is raised as it is."""
    give_up = time.monotonic() + give_up_s
    attempt = 0
    while True:
        try:
            return step()
        except sqlite3.OperationalError as exc:
            error = fatal(exc)
            if error is not None:
                raise error from exc
            if not is_locked(exc) or time.monotonic() > give_up:
                raise
            attempt += 1
            if attempt % 20 == 0:
                logger.warning("celery-plus: SQLite database still locked (%d attempts)",
                               attempt)
            time.sleep(min(0.002 * attempt, 0.05) * (0.5 + random.random()))
