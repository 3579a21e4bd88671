"""Failed logins, counted, logged and limited per client address and in total (the
dashboard, :mod:`.web`).

Each request whose credentials match no secret is a failure: logged (address, path, how
many in the window) on ``celery_plus.admin.web``'s logger. A failure is refused (``429``
to a Bearer header, ``401`` with the Basic challenge to a browser, so a mistyped token is
asked for again; with ``Retry-After``) while its address has had :data:`MAX_FAILURES`
failures in the last :data:`WINDOW` seconds, or all addresses together :data:`MAX_TOTAL`
(so guesses from rotating addresses, or a forwarded address a client makes up, are limited
too). Valid credentials are never refused: an operator who shares the address with whoever
is guessing (``ssh -L``: everyone is 127.0.0.1) keeps working. Why that is safe: the
secrets' minimum strength (docs/decisions.md, "Failed logins are limited, valid ones never").
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque

logger = logging.getLogger("celery_plus.admin.web")

#: Failures one address may have in :data:`WINDOW` seconds before its failures are refused.
MAX_FAILURES = 10
#: Failures all addresses together may have in :data:`WINDOW` seconds.
MAX_TOTAL = 100
WINDOW = 60.0
#: Most addresses remembered (the stalest are forgotten first).
MAX_ADDRESSES = 10_000


def _wait(times: deque[float], limit: int, window: float, now: float) -> float:
    """Seconds until fewer than ``limit`` of ``times`` are in the last ``window``."""
    if len(times) < limit:
        return 0.0
    return max(0.0, window - (now - times[-limit]))


class Throttle:
    """Failed logins per address and in total (see the module docstring)."""

    def __init__(self, max_failures: int = MAX_FAILURES, window: float = WINDOW,
                 max_total: int = MAX_TOTAL) -> None:
        self.max_failures, self.window, self.max_total = max_failures, window, max_total
        self._failures: dict[str, deque[float]] = {}
        self._total: deque[float] = deque(maxlen=max_total)
        self._lock = threading.Lock()

    def failed(self, address: str, path: str) -> float:
        """Count and log a failed login from ``address``: seconds until a failure from it
        is answered again (0: answer this one; more: refuse it)."""
        now = time.monotonic()
        with self._lock:
            times = self._failures.pop(address, None)
            if times is None:
                if len(self._failures) >= MAX_ADDRESSES:
                    del self._failures[next(iter(self._failures))]
                times = deque(maxlen=self.max_failures)
            self._failures[address] = times  # (last: the most recently failed)
            mine = _wait(times, self.max_failures, self.window, now)
            everyone = _wait(self._total, self.max_total, self.window, now)
            times.append(now)
            self._total.append(now)
            count = sum(1 for t in times if now - t <= self.window)
            total = sum(1 for t in self._total if now - t <= self.window)
        wait = max(mine, everyone)
        logger.warning("celery-plus admin: failed login from %s (%s; %d from it and %d in all "
                       "in the last %d s%s)", address, path[:200], count, total, self.window,
                       f"; refused for {wait:.0f} s" if wait > 0 else "")
        return wait
