"""Whether the live workers read a stored format, as their records announce: a publisher's
cached look, so a newer format is not written while a worker that cannot read it runs.

Each worker's record says which stored formats it reads (``WorkerBeat.reads``, written by
its lease keeper every heartbeat interval). A publisher that would write a format asks
:meth:`Readers.all_read` before each publish; the answer comes from one look at the store
(its worker records and its clock) at most every :data:`LOOK_EVERY` seconds, never from a
store read per publish. A record counts while its worker is not ``gone``
(``model.store.worker_health``: alive or late); a record that announces nothing counts as
reading ``formats.UNANNOUNCED``. A look that fails keeps the last answer (a publish never
fails for it). Each change of answer is logged once: a warning naming the workers that
cannot read the format and the setting that writes the older one for good, then an info
line when none is left. A worker with no record at all is not seen (docs/upgrading.md).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence

from celery_plus.model.store import WorkerBeat, worker_health

logger = logging.getLogger("celery_plus.transport")

#: Seconds between two looks at the workers' records (about a heartbeat interval).
LOOK_EVERY = 10.0


class Readers:
    """The live workers' announced formats, looked up at most every ``every`` seconds.

    ``records``: the store's worker records; ``now_ms``: the store's clock; ``setting``: the
    setting a user sets to write the older format for good (named in the warning)."""

    def __init__(self, records: Callable[[], Sequence[WorkerBeat]],
                 now_ms: Callable[[], int], setting: str, every: float = LOOK_EVERY,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._records = records
        self._now_ms = now_ms
        self._setting = setting
        self._every = every
        self._clock = clock
        self._lock = threading.Lock()
        self._next_look = 0.0
        self._live: list[WorkerBeat] = []
        self._unable: dict[str, tuple[str, ...]] = {}
        self._answers: dict[str, bool] = {}

    def all_read(self, fmt: str) -> bool:
        """Whether every live worker reads ``fmt`` (as of the last look; the fast path is a
        clock read and a dict lookup)."""
        due = self._clock() >= self._next_look
        answer = None if due else self._answers.get(fmt)
        if answer is not None:
            return answer
        if due:
            self._look()
        with self._lock:
            unable = tuple(b.node for b in self._live if not b.can_read(fmt))
            if unable != self._unable.get(fmt, ()):
                self._unable[fmt] = unable
                _log_change(fmt, unable, self._setting)
            self._answers[fmt] = not unable
        return not unable

    def _look(self) -> None:
        """Read the records, once per interval whichever thread asks first; the store call
        is made outside the lock (a fork or a slow store never leaves it held)."""
        with self._lock:
            if self._clock() < self._next_look:
                return  # another thread looked meanwhile
            self._next_look = self._clock() + self._every
        try:
            beats, now = self._records(), self._now_ms()
        except Exception as exc:  # the publish itself meets the outage, if any
            logger.debug("celery-plus: could not read the workers' records: %r", exc)
            return
        live = [b for b in beats if worker_health(b.at_ms, b.interval_ms, now) != "gone"]
        with self._lock:
            self._live, self._answers = live, {}


def _log_change(fmt: str, unable: tuple[str, ...], setting: str) -> None:
    if unable:
        logger.warning(
            "celery-plus: %d live worker(s) cannot read the stored format %r this publisher "
            "writes (%s): publishing in the format every one reads until they are upgraded or "
            "gone. During a rolling upgrade set %s on every process to write that format for "
            "good (docs/upgrading.md).", len(unable), fmt, ", ".join(unable[:5]), setting)
    else:
        logger.info("celery-plus: every live worker reads the stored format %r: "
                    "publishing in it again", fmt)
