"""One warning a while: a store outage hits every call of a process, and one line says so."""

from __future__ import annotations

import logging
import threading
import time


class Throttled:
    """Logs a message of a kind as a WARNING at most once per ``every_s``; the others of that
    kind within it at ``quiet_level`` (None: not at all)."""

    def __init__(self, logger: logging.Logger, every_s: float,
                 quiet_level: int | None = None) -> None:
        self.logger = logger
        self.every_s = every_s
        self.quiet_level = quiet_level
        self._warned_at: dict[str, float] = {}
        self._lock = threading.Lock()

    def warn(self, kind: str, message: str) -> None:
        now = time.monotonic()
        with self._lock:
            due = now - self._warned_at.get(kind, -self.every_s) >= self.every_s
            if due:
                self._warned_at[kind] = now
        level = logging.WARNING if due else self.quiet_level
        if level is not None:
            self.logger.log(level, "celery-plus: %s", message)
