"""The store interfaces every durable backend implements, and the values they exchange.

Callers name the narrow interface they use (:class:`JobStore` for the channel's job
operations, :class:`Records` for one job's record, ...); :class:`Backend` is all of them,
what each store implements and the transport holds. Each backend makes every operation one
atomic step in its store (one Lua script, one SQL transaction).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol

from celery_plus.model import formats
from celery_plus.model.details import clean_detail, encode_detail
from celery_plus.model.job_record import JobRecord

__all__ = ["JobRecord", "clean_detail", "encode_detail"]

#: Settle actions: ack = completed; fail/reject = dead letter; requeue = back to enqueued
#: (dead letter once deliveries reach the limit); defer = as requeue, but scheduled after a
#: back-off growing with the deliveries (``rules.defer_ms``); release = back to enqueued,
#: uncounted.
SETTLE_ACTIONS = ("ack", "fail", "reject", "requeue", "defer", "release")


@dataclass(frozen=True)
class NewJob:
    """One task message to store: the kombu envelope plus extension fields."""

    id: str
    queue: str
    message: str
    name: str = ""
    priority: int = 0
    eta_ms: int = 0
    unique_lock: str = ""
    unique_window: str = ""
    unique_ttl_ms: int = 0
    concurrency_group: str = ""
    concurrency_limit: int = 0
    max_deliveries: int = 0
    #: The lease token of the running delivery this message continues (retry,
    #: ``Task.replace``); 0 for an ordinary publish. A continuation applies only while that
    #: claim is current; a publish of a running job's id without its current token changes
    #: nothing (``PublishOutcome.fenced``).
    lease_token: int = 0
    #: Cluster rate limit: at most ``rate_limit`` starts of ``rate_group`` in any
    #: ``rate_window_ms`` (``rate_group`` "" = none). Decided at claim time, counting the
    #: claims not started yet (:meth:`Backend.rate_started`); a job over the limit is
    #: parked (``blocked``) until the window has room.
    rate_group: str = ""
    rate_limit: int = 0
    rate_window_ms: int = 0


@dataclass(frozen=True)
class PublishOutcome:
    """What a publish did: stored (``accepted``) or coalesced into ``holder_id``.

    ``fenced``: nothing was stored because the message named a job it may not change: a
    running job without its current lease token, or a continuation whose claim is no longer
    current (``holder_id`` is then the job's own id and ``state`` its state). A job that its
    own delivery already finished (an early ack) is published anew, as any finished job.
    """

    accepted: bool
    job_id: str
    holder_id: str | None = None
    state: str = ""
    continued: bool = False
    fenced: bool = False


@dataclass(frozen=True)
class Claim:
    """A job claimed by a worker: deliver ``message``; settle with ``(job_id, token)``."""

    job_id: str
    token: int
    message: str | bytes
    deliveries: int
    queue: str


@dataclass(frozen=True)
class Settle:
    """End of a claim. Applied only while the claim's token is still current.

    Backends store ``detail`` through :func:`clean_detail` (any text, any size, any type).
    """

    job_id: str
    token: int
    action: str
    detail: dict[str, Any] | None = None
    #: How long the claim's task ran before this settle (ms, measured by the worker; None:
    #: not known). The store then keeps ``now - run_ms`` as the job's start instead of its
    #: claim time (a job prefetched for a while starts when its task starts).
    run_ms: int | None = None
    #: The claim's delivery count, for the worker's own log of a ``defer`` once stored (how
    #: long the job waits: ``rules.defer_ms``); stores do not read it.
    deliveries: int | None = None


#: A heartbeat's start mark: the claim's task has not started yet (prefetched: "reserved").
NOT_STARTED = -1


def start_time(claimed_ms: int, now_ms: int, run_ms: int) -> int:
    """The start a store keeps for a claim made at ``claimed_ms`` whose task started
    ``run_ms`` before ``now_ms``: never before the claim, never after now."""
    return max(claimed_ms, min(now_ms, now_ms - max(run_ms, 0)))


@dataclass
class ClaimResult:
    claims: list[Claim] = field(default_factory=list)
    blocked: list[str] = field(default_factory=list)
    dead_lettered: list[tuple[str, str]] = field(default_factory=list)
    #: Seconds until the next scheduled job is due (None: nothing scheduled).
    next_due: float | None = None


#: Outcomes of :meth:`Backend.claim_job`.
CLAIM_JOB_OUTCOMES = ("claimed", "blocked", "held", "finished", "missing")


@dataclass(frozen=True)
class JobClaim:
    """What :meth:`Backend.claim_job` did with one job id.

    ``claimed``: the job is now running under this claim (``token``, ``deliveries``);
    ``blocked``: its concurrency group is full (nothing changed); ``held``: another claim is
    running it (``lease_left_ms`` until that lease expires); ``finished``: it is completed,
    failed, canceled or discarded (``state`` says which); ``missing``: there is no record.
    """

    outcome: str
    state: str = ""
    token: int = 0
    deliveries: int = 0
    lease_left_ms: int = 0


@dataclass(frozen=True)
class ScheduledJob:
    """A job waiting for its ETA: what ``inspect scheduled`` reports about it."""

    job_id: str
    queue: str
    due_ms: int
    message: str | bytes


#: Outcomes of :meth:`Backend.schedule_fire`.
FIRE_OUTCOMES = ("fired", "skipped", "paused", "stale", "missing")


@dataclass(frozen=True)
class ScheduleRecord:
    """One periodic schedule entry as the store keeps it (``celery_plus/beat.py``).

    ``last_due_ms``: the due time of the last tick that was fired, skipped or passed while
    paused (the fence: a tick fires only from the ``last_due_ms`` it was computed from);
    ``next_due_ms``: the next tick as the leader last computed it; ``fired``: jobs published.
    """

    name: str
    last_due_ms: int
    paused: bool = False
    task: str = ""
    schedule: str = ""
    next_due_ms: int = 0
    last_job_id: str = ""
    fired: int = 0


#: The columns of the SQL stores' ``schedules`` table, in :func:`schedule_record`'s order.
SCHEDULE_COLUMNS = "name, last_due_ms, paused, task, schedule, next_due_ms, last_job, fired"


def schedule_record(row: Sequence[Any]) -> ScheduleRecord:
    """A ``schedules`` row of a SQL store (columns as :data:`SCHEDULE_COLUMNS`)."""
    name, last, paused, task, schedule, next_due, last_job, fired = row
    return ScheduleRecord(str(name), int(last), bool(paused), str(task), str(schedule),
                          int(next_due), str(last_job), int(fired))


class Verdict(str, Enum):
    """What :meth:`JobStore.heartbeat` says of one claim (``rules.heartbeat_verdict``).

    ``renewed``: the claim is current (its job runs under its token): its lease is extended.
    ``ended``: its own run ended it — acked (a heartbeat crossing the ack), or continued by
    a retry / ``Task.replace`` (whether the continuation still waits or another claim took
    it since): not lost, its run is not stopped. ``lost``: anything else (no record,
    recovered after its lease expired, taken over, cancelled, dead-lettered by recovery; a
    recovery recorded under its token, whatever the job became since).
    """

    RENEWED = "renewed"
    ENDED = "ended"
    LOST = "lost"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Recovered:
    job_id: str
    outcome: str  # requeued | coalesced | dead


class Store(Protocol):
    """What every store interface has: reaching the store, closing it, and its clock."""

    def connect(self) -> None:
        """Reach the store now: a store that is down raises one of the transport's
        connection errors (backends are made without connecting)."""
        ...

    def close(self) -> None: ...

    def now_ms(self) -> int:
        """The store's clock (ms since the epoch): what leases, holds and ETAs are timed by."""
        ...


class JobStore(Store, Protocol):
    """The job operations: what the channel, the lease keeper and publishers call
    (``transport/channel.py``, ``keeper.py``, ``event_loop.py``, ``transactional.py``,
    ``coordination/``, ``control.py``)."""

    def publish(self, job: NewJob) -> PublishOutcome:
        """Store one message as a job, deciding uniqueness atomically.

        The id of a waiting job: its message is replaced; of a finished job: it starts anew;
        of a running job: a continuation (claim ended, new message scheduled) only when
        ``job.lease_token`` is that claim's token, else ``fenced`` (nothing changes), as is
        a continuation of a claim that ended (unless that claim finished the job itself).
        A non-TTL hold is taken until the due time plus the backstop; a key other than the
        job's previous one releases the previous one.
        """
        ...

    def publish_many(self, jobs: Sequence[NewJob]) -> list[PublishOutcome]:
        """Publish several jobs in one round trip; outcomes in the same order.

        Each job is still its own atomic step (uniqueness decided per job, in order).
        """
        ...

    def claim(
        self,
        queues: Sequence[str],
        worker_id: str,
        max_jobs: int,
        settles: Sequence[Settle] = (),
    ) -> ClaimResult: ...

    def claim_job(self, job_id: str, worker_id: str) -> JobClaim:
        """Claim one waiting job by id, as ``claim`` would claim it (one atomic step).

        For a job whose message another broker delivered (the coordination store): an
        enqueued, scheduled (due or not) or blocked job becomes running with a new lease
        token and a counted delivery, its concurrency slot taken in the same step and its
        hold treated as by ``claim`` (pending window released, running window refreshed). A
        full group changes nothing (``blocked``); a running, finished or unknown job is
        reported, not changed. The claim is settled, renewed and recovered like any other.
        """
        ...

    def settle(self, settles: Sequence[Settle]) -> list[tuple[str, str]]: ...

    def rate_started(self, job_id: str, token: int) -> None:
        """The task of claim ``(job_id, token)`` (a job of a rate group) starts now.

        A claim counts in its group's window from the claim on, as not started yet, until
        this (or its first lease deadline); from here on it counts by this start time, for
        the group's window. So a prefetched job that waits in its worker still never puts
        more than the limit's starts into one window. Nothing for a job of no rate group.
        """
        ...

    def heartbeat(self, held: Sequence[tuple[str, int]],
                  starts: Sequence[int | None] | None = None) -> list[Verdict]:
        """Renew the leases of the claims ``held`` ((job id, token) pairs) that are still
        current, and say what became of the others, in one atomic step: one
        :class:`Verdict` per pair, in the order given (a job may be named twice, under two
        tokens: each pair has its own verdict). Whatever else a renewal does (a claim of a
        rate group not started yet keeps counting in its window) is done for the renewed
        ones only.

        ``starts`` (one per pair; None: not known) are the worker's start marks: the task
        started that many ms ago (the store keeps ``now - ms`` as the job's start, once per
        claim: :func:`start_time`), or :data:`NOT_STARTED` (the claim is shown
        "reserved" until a start mark says otherwise)."""
        ...

    def recover(self, limit: int = 100) -> list[Recovered]: ...

    def maintain(self, worker_id: str) -> bool: ...

    def wait(
        self, queues: Sequence[str], transient: Sequence[str], timeout: float
    ) -> tuple[str, str, bytes | None] | None: ...

    def size(self, queue: str) -> int: ...

    def purge(self, queue: str) -> int:
        """Delete the jobs waiting in ``queue`` (enqueued, blocked, scheduled); their count.

        Running jobs are held by workers and stay. The non-TTL unique holds of the deleted
        jobs are released (TTL holds are never released early). One atomic step.
        """
        ...

    def scheduled_jobs(self, queues: Sequence[str], limit: int = 1000) -> list[ScheduledJob]:
        """Jobs of ``queues`` waiting for their ETA (state ``scheduled``), soonest first (ties
        by task id), at most ``limit`` — the store's answer to ``inspect scheduled``."""
        ...


class RoutingStore(Store, Protocol):
    """Transient queues and exchange bindings: the channel's non-durable side
    (``transport/channel.py``, ``transport/transient.py``)."""

    def push_transient(self, queue: str, message: bytes) -> None: ...

    def pop_transient(self, queue: str) -> bytes | None: ...

    def transient_size(self, queue: str) -> int: ...

    def purge_transient(self, queue: str) -> int: ...

    def bind(self, exchange: str, binding: str, ttl_ms: int = 0) -> None:
        """Add ``binding`` to ``exchange``'s table (idempotent).

        ``ttl_ms > 0``: the binding lapses ``ttl_ms`` from now (store clock) unless bound
        again — a transient queue's consumer keeps it alive that way, so the bindings of a
        process that died go away by themselves. ``0``: it stays until unbound.
        """
        ...

    def bindings(self, exchange: str) -> list[str]:
        """``exchange``'s bindings that have not lapsed."""
        ...

    def unbind(self, exchange: str, binding: str) -> None: ...

    def mark_transient(self, queue: str, ttl_ms: int) -> None:
        """Record that ``queue`` was declared transient (not durable, auto-delete or
        exclusive), for ``ttl_ms`` from now; marking it again extends it. Publishers that
        never declared the queue (a worker answering an ``rpc://`` client) learn it here."""
        ...

    def is_marked_transient(self, queue: str) -> bool:
        """True while a mark of :meth:`mark_transient` on ``queue`` has not lapsed."""
        ...


class ScheduleStore(Store, Protocol):
    """Leases of roles and periodic schedules (``celery_plus/beat.py``)."""

    def lead(self, role: str, holder: str, ttl_ms: int) -> bool:
        """Take or renew the lease of ``role`` for ``holder`` for ``ttl_ms`` (store clock).

        True while ``holder`` has it: it was free, lapsed, or ``holder``'s already (renewed).
        One atomic step, so two contenders never both get it.
        """
        ...

    def resign(self, role: str, holder: str) -> None:
        """Give up ``role`` if ``holder`` has it (another contender may take it at once)."""
        ...

    def role_holder(self, role: str) -> tuple[str, int] | None:
        """Who holds ``role`` and when its lease lapses (ms, store clock); None if no one."""
        ...

    def schedule_register(self, name: str, last_due_ms: int, task: str = "",
                          schedule: str = "") -> ScheduleRecord:
        """Record entry ``name`` with ``last_due_ms`` unless the store has it already (then
        its stored times and pause flag are kept; ``task`` and ``schedule`` are updated).
        Returns the entry as stored."""
        ...

    def schedule_fire(self, name: str, expected_last_ms: int, due_ms: int, next_ms: int,
                      job: NewJob | None) -> str:
        """Advance entry ``name`` from ``expected_last_ms`` to the tick ``due_ms``, and
        publish ``job`` for it, in one atomic step.

        ``stale``: the stored last due time is not ``expected_last_ms`` (another beat
        process fired or skipped this tick): nothing changes. ``missing``: no such entry.
        Otherwise the entry's last due time becomes ``due_ms`` (its next, for display,
        ``next_ms``) and: ``paused`` (a paused entry publishes nothing), ``skipped`` (``job``
        is None: a tick skipped by the catch-up policy), or ``fired`` (``job`` published
        as :meth:`JobStore.publish` would).
        """
        ...

    def schedules(self) -> list[ScheduleRecord]:
        """Every schedule entry the store has, by name."""
        ...


#: A worker record with no beat for this long is dropped (the workers page forgets it).
WORKER_RECORD_KEEP_MS = 24 * 3600 * 1000
#: A beat within this many of the worker's intervals (and a second) is ``alive``.
ALIVE_INTERVALS = 2
#: A beat within this many intervals is ``late``; older is ``gone``.
LATE_INTERVALS = 6


def worker_health(last_beat_ms: int, interval_ms: int, now_ms: int) -> str:
    """``alive``, ``late`` or ``gone`` for a worker whose last beat was at ``last_beat_ms``."""
    since = now_ms - last_beat_ms
    if since <= ALIVE_INTERVALS * interval_ms + 1000:
        return "alive"
    return "late" if since <= LATE_INTERVALS * interval_ms + 1000 else "gone"


@dataclass(frozen=True)
class WorkerBeat:
    """A Celery worker's record in the store, written by its lease keeper every heartbeat
    interval (``WorkerRecords.worker_beat``): the admin's workers page and health."""

    #: Celery's node name (``celery@host``): the name remote control addresses.
    node: str
    host: str
    pid: int
    #: The queues it consumes (as it started), and its heartbeat interval (ms).
    queues: tuple[str, ...] = ()
    interval_ms: int = 0
    #: Store times (ms): its first beat as this process (a new pid starts anew), its last.
    started_ms: int = 0
    at_ms: int = 0
    #: The stored message formats it reads (``model/formats.py``); () = not announced (a
    #: record of an earlier release): taken as ``formats.UNANNOUNCED``.
    reads: tuple[str, ...] = ()

    def info(self) -> dict[str, Any]:
        """What the store keeps as given (the times are the store's)."""
        info: dict[str, Any] = {"host": self.host, "pid": self.pid, "queues": list(self.queues),
                                "interval_ms": self.interval_ms}
        if self.reads:
            info["reads"] = list(self.reads)
        return info

    def can_read(self, fmt: str) -> bool:
        """Whether this worker reads stored format ``fmt``, as it announced (or, announcing
        nothing, as every release that keeps records does)."""
        return fmt in (self.reads or formats.UNANNOUNCED)

    @classmethod
    def of(cls, node: str, info: Any, started_ms: int, at_ms: int) -> WorkerBeat:
        """A record from its stored info (JSON text or a dict; anything else: empty)."""
        if isinstance(info, (str, bytes)):
            try:
                info = json.loads(info)
            except ValueError:
                info = {}
        if not isinstance(info, dict):
            info = {}
        queues, reads = info.get("queues"), info.get("reads")
        return cls(node=node, host=str(info.get("host") or ""),
                   pid=_int(info.get("pid")),
                   queues=tuple(str(q) for q in queues) if isinstance(queues, list) else (),
                   interval_ms=_int(info.get("interval_ms")), started_ms=int(started_ms),
                   at_ms=int(at_ms),
                   reads=tuple(str(f) for f in reads) if isinstance(reads, list) else ())


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


class WorkerRecords(Store, Protocol):
    """The Celery workers' own records (their heartbeats), for the admin."""

    def worker_beat(self, beat: WorkerBeat) -> None:
        """Record a beat of worker ``beat.node`` now (store time): its info replaced, its
        ``started_ms`` kept while its pid is the same. Records with no beat for
        :data:`WORKER_RECORD_KEEP_MS` are dropped."""
        ...

    def worker_beats(self) -> list[WorkerBeat]:
        """Every worker record kept, by node name."""
        ...

    def rate_usage(self) -> list[RateUsage]:
        """Every cluster rate group with starts or claims in its window or jobs parked (at
        most :data:`RATE_GROUPS_MAX`), by name."""
        ...


#: Rate groups a usage read looks at, at most.
RATE_GROUPS_MAX = 1000


@dataclass(frozen=True)
class RateUsage:
    """A cluster rate group's window now (``WorkerRecords.rate_usage``): its starts in the
    window, its claims not started yet (they count too), its jobs parked (``blocked``
    because the window was full), its limit and window (ms)."""

    group: str
    limit: int
    window_ms: int
    starts: int
    pending: int
    parked: int


def rate_usage_of(now_ms: int, claims: Sequence[tuple[str, bool, int]],
                  limits: dict[str, tuple[int, int]], parked: dict[str, int]
                  ) -> list[RateUsage]:
    """Usage per group from its claims ((group, started, at ms): a start's time, or a
    claim's lapse), each group's (limit, window ms) and parked counts (the SQL stores and
    the in-process store share it)."""
    starts: dict[str, int] = {}
    pending: dict[str, int] = {}
    for group, started, at in claims:
        window = limits.get(group, (0, 0))[1]
        if started and at >= now_ms - window:
            starts[group] = starts.get(group, 0) + 1
        elif not started and at >= now_ms:
            pending[group] = pending.get(group, 0) + 1
    names = sorted(set(starts) | set(pending) | {g for g, n in parked.items() if n})
    return [RateUsage(g, *limits.get(g, (0, 0)), starts.get(g, 0), pending.get(g, 0),
                      parked.get(g, 0)) for g in names[:RATE_GROUPS_MAX]]


class AdminPrimitives(Store, Protocol):
    """Atomic writes of operators and the admin, outside the job operations."""

    def schedule_pause(self, name: str, paused: bool) -> bool:
        """Pause (no jobs for its ticks) or resume entry ``name``; False if there is none."""
        ...

    def schedule_delete(self, name: str) -> bool:
        """Forget entry ``name`` (its ticks are fired again from scratch if it comes back)."""
        ...

    def queue_pause(self, queue: str, paused: bool) -> int:
        """Pause (``paused``) or resume ``queue`` for every worker, durably, in one atomic
        step; the store's time of that step (ms): the pause's acknowledgement.

        Once it returns, no ``claim`` hands out a job of a paused queue (a claim running at
        the same time ends before the step, or sees the pause); publishes to it are stored
        and wait; claims made before it run on. Resuming makes its waiting jobs claimable at
        once and wakes idle consumers. Idempotent: pausing a paused queue keeps the time it
        was first paused (:meth:`paused_queues`).
        """
        ...

    def paused_queues(self) -> dict[str, int]:
        """Every paused queue and the store's time (ms) it was paused."""
        ...


class Records(Store, Protocol):
    """Reads of one job and of the store's counters (the coordinator, the admin, followers
    of a coalesced job, ``/metrics``); nothing here changes the store."""

    def record(self, job_id: str) -> JobRecord | None:
        """The job record (each store builds it from its own fields), or None."""
        ...

    def raw_message(self, job_id: str) -> bytes | None:
        """The job's stored message, byte for byte (``record()`` decodes it as text)."""
        ...

    def stats(self) -> dict[str, int]:
        """Cluster counters (deduplicated, recovered, dead_lettered, blocked); absent = 0."""
        ...


class Backend(JobStore, RoutingStore, ScheduleStore, AdminPrimitives, Records, WorkerRecords,
              Protocol):
    """Every store operation: what each store implements and the transport holds."""

    def push_raw(self, queue: str, job_id: str, raw: bytes | str) -> None:
        """Store bytes as a job's message with no checks (operators' and tests' tool): a
        publish whose message is taken as it is, written once for every store."""
        self.publish(NewJob(id=job_id, queue=queue, message=raw))  # type: ignore[arg-type]
