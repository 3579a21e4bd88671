"""What the in-process store keeps: job records, holds, slots, counters — plain Python data.

One :class:`MemoryState` is one store; every backend opened on it (``MemoryBackend``) shares
it, and every operation runs under its lock, so each is one atomic step as in the other
stores. A job reads back as a :class:`~celery_plus.model.job_record.JobRecord`, as in the
other stores.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from celery_plus.model.job_record import JobRecord
from celery_plus.model.rules import hold_is_live
from celery_plus.model.store import ScheduleRecord

Clock = Callable[[], int]


def wall_clock() -> int:
    """Milliseconds since the epoch (the default clock)."""
    return int(time.time() * 1000)


@dataclass
class Job:
    """One job record; ``None`` is a field the record does not have (yet)."""

    id: str
    queue: str
    name: str
    msg: bytes
    state: str
    score: int
    enqueued_ms: int
    due_ms: int
    max_deliveries: int
    deliveries: int = 0
    token: int | None = None
    #: (unique lock, window, ttl ms, concurrency group, slot limit); None for a job first
    #: published with neither a key nor a group.
    extension: tuple[str, str, int, str, int] | None = None
    #: (rate group, limit, window ms); None without a rate limit.
    rate: tuple[str, int, int] | None = None
    rate_parked: bool = False
    started_ms: int | None = None
    finished_ms: int | None = None
    worker: str | None = None
    lease_ms: int | None = None
    reason: str | None = None
    exc_type: str | None = None
    exc_message: str | None = None
    traceback: str | None = None
    history: list[dict[str, Any]] | None = None
    #: The worker's start mark of the current claim (``JobRecord.start_mark``).
    start_mark: int = 0

    @property
    def lock(self) -> str:
        return self.extension[0] if self.extension else ""

    @property
    def window(self) -> str:
        return self.extension[1] if self.extension else ""

    @property
    def ttl_ms(self) -> int:
        return self.extension[2] if self.extension else 0

    @property
    def group(self) -> str:
        return self.extension[3] if self.extension else ""

    @property
    def limit(self) -> int:
        return self.extension[4] if self.extension else 0

    @property
    def rate_group(self) -> str:
        return self.rate[0] if self.rate else ""

    def record(self) -> JobRecord:
        """The job as a record (a field it does not have yet reads as "" or 0)."""
        lock, window, ttl, group, limit = self.extension or ("", "", 0, "", 0)
        rate_group, rate_limit, rate_window = self.rate or ("", 0, 0)
        return JobRecord(
            id=self.id, state=self.state, queue=self.queue, name=self.name,
            message=self.msg.decode(errors="replace"), score=self.score,
            lease_token=self.token or 0, deliveries=self.deliveries,
            max_deliveries=self.max_deliveries, enqueued_ms=self.enqueued_ms,
            due_ms=self.due_ms, started_ms=self.started_ms or 0,
            finished_ms=self.finished_ms or 0, worker=self.worker or "", unique_lock=lock,
            unique_window=window, unique_ttl_ms=ttl, concurrency_group=group,
            concurrency_limit=limit, rate_group=rate_group, rate_limit=rate_limit,
            rate_window_ms=rate_window, reason=self.reason or "",
            exc_type=self.exc_type or "", exc_message=self.exc_message or "",
            traceback=self.traceback or "",
            history=tuple(json.loads(json.dumps(self.history or []))),
            start_mark=self.start_mark, rate_parked=self.rate_parked)


@dataclass
class Hold:
    holder: str
    deadline: int


@dataclass
class RateGroup:
    """A rate group's window: starts by time, and claims not started yet by their first
    lease deadline, each keyed by (job id, token); ``wake``: when its parked jobs are
    looked at again (None: none parked)."""

    starts: dict[tuple[str, int], int] = field(default_factory=dict)
    pending: dict[tuple[str, int], int] = field(default_factory=dict)
    wake: int | None = None


@dataclass
class MemoryState:
    """One in-process store."""

    clock: Clock = wall_clock
    lock: threading.RLock = field(default_factory=threading.RLock)
    jobs: dict[str, Job] = field(default_factory=dict)
    holds: dict[str, Hold] = field(default_factory=dict)
    slots: dict[str, set[str]] = field(default_factory=dict)
    rates: dict[str, RateGroup] = field(default_factory=dict)
    seq: int = 0
    token: int = 0
    stats: dict[str, int] = field(default_factory=dict)
    #: Maintenance is taken until then (ms).
    maintenance_until: int = 0
    #: The blocked group the next maintenance pass starts after.
    group_cursor: str = ""
    transient: dict[str, list[bytes]] = field(default_factory=dict)
    transient_until: dict[str, int] = field(default_factory=dict)
    bindings: dict[str, dict[str, int | None]] = field(default_factory=dict)
    marks: dict[str, int] = field(default_factory=dict)
    leases: dict[str, Hold] = field(default_factory=dict)
    schedules: dict[str, ScheduleRecord] = field(default_factory=dict)
    #: Paused queues and when each was paused (ms): ``claim`` skips them.
    paused: dict[str, int] = field(default_factory=dict)
    #: The Celery workers' records by node name (``WorkerRecords``).
    workers: dict[str, Any] = field(default_factory=dict)
    #: The queue history: bucket ms -> (sampled at ms, sample JSON) (admin_base/queue_history).
    history: dict[int, tuple[int, str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        #: Notified after every change that may make work available (``wait``).
        self.changed = threading.Condition(self.lock)

    def stat(self, name: str, by: int = 1) -> None:
        self.stats[name] = self.stats.get(name, 0) + by

    def live_hold(self, lock: str, now: int) -> Hold | None:
        hold = self.holds.get(lock)
        return hold if hold is not None and hold_is_live(hold.deadline, now) else None


#: The named in-process stores of this process (``plus+memory://name``).
_NAMED: dict[str, MemoryState] = {}
_NAMED_LOCK = threading.Lock()


def named_state(name: str) -> MemoryState:
    """The in-process store called ``name`` (made on first use; ``""`` is the default one)."""
    with _NAMED_LOCK:
        state = _NAMED.get(name)
        if state is None:
            state = _NAMED[name] = MemoryState()
        return state


def forget_named(name: str | None = None) -> None:
    """Drop the named store ``name`` (every one with ``None``): the next use starts empty."""
    with _NAMED_LOCK:
        if name is None:
            _NAMED.clear()
        else:
            _NAMED.pop(name, None)
