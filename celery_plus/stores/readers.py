"""Whether the live workers read a stored format, as their records announce: a publisher's
cached look, so a newer format is not written while a worker that cannot read it runs.

Each worker's record says which stored formats it reads (``WorkerBeat.reads``, written by
its lease keeper every heartbeat interval). A publisher that would write a format asks
:meth:`Readers.all_read` before each publish; the answer comes from one look at the store
(its worker records and its clock) at most every :data:`LOOK_EVERY` seconds, never from a
store read per publish. One :class:`Readers` serves every connection of a process to one
store (:func:`readers_for`): a connection per publish (``broker_pool_limit = 0``) does not
mean a look per publish. A record counts while its worker is not ``gone``
(``model.store.worker_health``: alive or late); a record that announces nothing counts as
reading ``formats.UNANNOUNCED``. Until a look has succeeded the answer is no (the older
format, which every worker reads); a look that fails later keeps the last answer (a publish
never fails for it). Each change of answer is logged once: a warning naming the workers that
cannot read the format and the setting that writes the older one for good, then an info
line when none is left. A worker with no record at all is not seen (docs/upgrading.md).
"""

from __future__ import annotations

import logging
import os
import time
import weakref
from collections.abc import Callable, Hashable, Sequence
from typing import Protocol

from celery_plus.model.store import WorkerBeat, worker_health
from celery_plus.runtime.helper_threads import native_lock

logger = logging.getLogger("celery_plus.transport")

#: Seconds between two looks at the workers' records (about a heartbeat interval).
LOOK_EVERY = 10.0


class RecordSource(Protocol):
    """Where a look reads: the store's worker records and the clock that stamped them."""

    def worker_beats(self) -> Sequence[WorkerBeat]: ...

    def now_ms(self) -> int: ...


class Readers:
    """The live workers' announced formats, looked up at most every ``every`` seconds
    through the source that asks when a look is due.

    ``setting``: the setting a user sets to write the older format for good (named in the
    warning)."""

    def __init__(self, setting: str, every: float = LOOK_EVERY,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._setting = setting
        self._every = every
        self._clock = clock
        #: Held around plain data only (never a store call or a log line), re-made in a
        #: forked child (:func:`_after_fork_in_child`).
        self._lock = native_lock()
        self._next_look = 0.0
        self._looked = False
        self._live: list[WorkerBeat] = []
        self._unable: dict[str, tuple[str, ...]] = {}
        self._answers: dict[str, bool] = {}
        with _registry_lock:
            _every.add(self)

    def all_read(self, fmt: str, source: RecordSource) -> bool:
        """Whether every live worker reads ``fmt`` (as of the last look; the fast path is a
        clock read and a dict lookup). No until a look has succeeded."""
        if self._clock() >= self._next_look:
            self._look(source)
        answer = self._answers.get(fmt)
        return self._answer(fmt) if answer is None else answer

    def _answer(self, fmt: str) -> bool:
        with self._lock:
            if not self._looked:
                return False  # no look yet (in flight, or failed): the older format
            unable = tuple(b.node for b in self._live if not b.can_read(fmt))
            changed = unable != self._unable.get(fmt, ())
            self._unable[fmt] = unable
            self._answers[fmt] = not unable
        if changed:
            _log_change(fmt, unable, self._setting)
        return not unable

    def _look(self, source: RecordSource) -> None:
        """Read the records, once per interval whichever thread asks first; the store call
        is made outside the lock (a fork or a slow store never leaves it held)."""
        with self._lock:
            if self._clock() < self._next_look:
                return  # another thread looked meanwhile
            self._next_look = self._clock() + self._every
        try:
            beats, now = source.worker_beats(), source.now_ms()
        except Exception as exc:  # the publish itself meets the outage, if any
            logger.debug("celery-plus: could not read the workers' records: %r", exc)
            return
        live = [b for b in beats if worker_health(b.at_ms, b.interval_ms, now) != "gone"]
        with self._lock:
            self._live, self._answers, self._looked = live, {}, True


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


_registry_lock = native_lock()
_shared: dict[Hashable, Readers] = {}
_every: weakref.WeakSet[Readers] = weakref.WeakSet()


def readers_for(store: Hashable, setting: str) -> Readers:
    """The process's :class:`Readers` of ``store`` (its identity: URL and key prefix),
    created on first use and shared by every connection to it."""
    with _registry_lock:
        found = _shared.get(store)
    if found is None:
        made = Readers(setting)
        with _registry_lock:
            found = _shared.setdefault(store, made)
    return found


def _after_fork_in_child() -> None:
    """A child forked while another thread held a lock here gets it free (its last look's
    answers are kept: the store is the same)."""
    global _registry_lock
    _registry_lock = native_lock()
    for readers in list(_every):
        readers._lock = native_lock()


os.register_at_fork(after_in_child=_after_fork_in_child)
