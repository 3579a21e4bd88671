"""Failed logins, counted and logged per client address (the dashboard, :mod:`.web`).

Each request whose credentials match no secret is logged (address, path, how many in the
window) on ``celery_plus.admin.web``'s logger. An address with :data:`MAX_FAILURES` failures
in the last :data:`WINDOW` seconds is refused (``429`` with ``Retry-After``) before its
credentials are checked, until its oldest failure leaves the window — except a browser that
holds a valid session (it logged in before), so an operator who shares the address with
whoever is guessing keeps working.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque

logger = logging.getLogger("celery_plus.admin.web")

#: Failures one address may have in :data:`WINDOW` seconds before it is refused.
MAX_FAILURES = 10
WINDOW = 60.0
#: Most addresses remembered (the stalest are forgotten first).
MAX_ADDRESSES = 10_000


class Throttle:
    """Failed logins per address (see the module docstring)."""

    def __init__(self, max_failures: int = MAX_FAILURES, window: float = WINDOW) -> None:
        self.max_failures, self.window = max_failures, window
        self._failures: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def _recent(self, address: str, now: float) -> deque[float]:
        times = self._failures.get(address)
        if times is None:
            return deque()
        while times and now - times[0] > self.window:
            times.popleft()
        if not times:
            del self._failures[address]
        return times

    def wait(self, address: str) -> float:
        """Seconds until ``address`` may try again (0: it may now)."""
        now = time.monotonic()
        with self._lock:
            times = self._recent(address, now)
            if len(times) < self.max_failures:
                return 0.0
            return max(0.0, self.window - (now - times[-self.max_failures]))

    def failed(self, address: str, path: str) -> None:
        """Count and log a failed login from ``address``."""
        now = time.monotonic()
        with self._lock:
            times = self._recent(address, now)
            if address not in self._failures:
                if len(self._failures) >= MAX_ADDRESSES:
                    del self._failures[next(iter(self._failures))]
                self._failures[address] = times
            times.append(now)
            count = len(times)
        logger.warning("celery-plus admin: failed login from %s (%s; %d in the last %d s%s)",
                       address, path[:200], count, self.window,
                       "; refused until they are fewer" if count >= self.max_failures else "")
