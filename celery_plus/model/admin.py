"""The admin's view of a durable store: the ``AdminStore`` interface and the values it returns.

Every store's implementation is
:class:`~celery_plus.stores.admin_base.orchestration.StoreAdmin` (the
operations written once) with the store's own statements in its package
(``stores/{redis,sqlite,postgres,memory}/admin.py``); ``celery_plus.admin.api`` (the public
API), the CLI and the web page speak only this interface.

Rules every implementation follows (the conformance suite, ``tests/fast/conformance/test_admin.py``,
checks them on every backend):

* Every operation that changes a job is ONE atomic step in the store (a Lua script, an SQL
  transaction) that re-checks the job's state inside that step, so two operators acting on one
  job at once have one winner and a repeated operation is a no-op that says so
  (``OpResult.changed`` is False, ``OpResult.state`` is where the job is now).
* ``retry``: failed -> enqueued, same task id, deliveries reset to 0, history kept (plus an
  ``admin retry`` entry), last error details kept for ``show``; the unique hold is taken again
  with the publish rules. If another job holds the key the retry raises :class:`RetryConflict`
  naming the holder and changes nothing.
* ``discard``: failed -> discarded. The record is KEPT (state ``discarded``, ``fin`` = now) and
  pruned by maintenance like completed records (``plus_completed_retention``), so a repeated
  discard reports "already discarded" and ``show`` still tells what happened.
* ``cancel``: enqueued | scheduled | blocked -> canceled: out of its queue, schedule or blocked
  set, its non-TTL unique hold released if it holds it, ``fin`` = now; pruned like completed.
  Running jobs are not canceled (use Celery's ``revoke``).
* Bulk ``retry_many`` / ``purge`` take a :class:`Scope` (task name, queue, age, or a list of
  task ids); an empty scope needs ``all=True`` (:class:`UnscopedOperation` otherwise). Each job
  is re-checked against the scope (and its state) inside the atomic step that changes it.
* ``finished_since(since_ms)``: how many completed and failed records finished at or after
  ``since_ms`` (the overview's throughput), counted from the finish times the records keep.
* Listings are newest first: by finish time (completed, failed, canceled, discarded), start
  time (running) or enqueue time (enqueued, scheduled, blocked); ties by task id, descending.
  ``Query.oldest_first`` turns the order around. A ``text`` search decodes each candidate's
  message (:func:`text_page`): with ``Query.text_limit`` it looks at the first that many
  candidates (in the listing's order) only.
* Listings are bounded: a row's error message, reason and arguments preview are cut to
  :data:`LIST_TEXT` characters, and a message larger than :data:`PREVIEW_BYTES` is not read
  for its preview (``show`` gives the whole job). Implementations cut them in the store's
  reply, so a listing of huge dead letters costs the page, not the records.
* ``worker_leases()``: per worker id (``host:pid:nonce``, the claims' ``wk``), the running
  jobs it holds and its newest lease deadline (every heartbeat pushes it forward).
* ``finished_histogram(since_ms, bucket_ms, buckets)``: completed and failed records per
  time bucket (the overview's chart); ``wait_samples(since_ms, limit)``: (queue, ms from
  ready to started) of the newest ``limit`` jobs started since then (per-queue latency).
"""

from __future__ import annotations

import base64
import json
import math
from collections.abc import Iterable, Iterator, Sequence, Sized
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Protocol

from celery_plus.model import rules
from celery_plus.model.capped import is_capped
from celery_plus.model.checkpoint import checkpoint
from celery_plus.model.job_record import JobRecord, as_text

#: States a job record can be in, in lifecycle order.
STATES = rules.STATES
#: States that wait for a worker (what ``cancel`` applies to).
WAITING = rules.WAITING
#: Finished states whose records ``purge`` deletes.
PURGEABLE = ("failed", "completed", "canceled", "discarded")
#: Largest page ``jobs`` returns (and most task ids a bulk operation takes by id).
MAX_PER_PAGE = 1000
#: Characters of a listing row's error message, reason and arguments preview.
LIST_TEXT = 1000
#: Messages larger than this are not read for a listing's arguments preview.
PREVIEW_BYTES = 64 * 1024
#: Jobs a bulk operation changes per atomic store step.
BATCH = 500
#: Records a text search reads from the store at a time (bounds its memory).
SEARCH_CHUNK = 50


def unreachable_errors() -> tuple[type[BaseException], ...]:
    """Exceptions meaning the store cannot be reached (the dashboard answers 503, the CLI
    says so and exits 1: neither shows a traceback)."""
    import sqlite3

    import redis
    from kombu.exceptions import ConnectionError as KombuConnectionError

    # (the SQL stores' StoreUnavailable is a kombu ConnectionError)
    errors: list[type[BaseException]] = [redis.ConnectionError, redis.TimeoutError,
                                         sqlite3.OperationalError, ConnectionError,
                                         KombuConnectionError]
    try:
        import psycopg
        import psycopg_pool

        errors += [psycopg.OperationalError, psycopg_pool.PoolTimeout]
    except ImportError:  # pragma: no cover  (the postgres extra is not installed)
        pass
    return tuple(errors)


class AdminError(Exception):
    """Base class of the admin's errors."""


class JobNotFound(AdminError, KeyError):
    """No job record with this task id (never published, or pruned)."""

    def __init__(self, job_id: str) -> None:
        super().__init__(job_id)
        self.job_id = job_id

    def __str__(self) -> str:
        return f"job {self.job_id!r} not found"


class RetryConflict(AdminError):
    """A retry would break uniqueness: another job holds the failed job's unique key."""

    def __init__(self, job_id: str, holder_id: str, lock: str) -> None:
        super().__init__(job_id, holder_id, lock)
        self.job_id = job_id
        self.holder_id = holder_id
        self.lock = lock

    def __str__(self) -> str:
        return (f"cannot retry job {self.job_id!r}: its unique key {self.lock!r} is held by job "
                f"{self.holder_id!r}; retry after that job finishes (or discard this one)")


class UnscopedOperation(AdminError, ValueError):
    """A bulk operation with no task, queue or age given, and no ``all=True``."""

    def __str__(self) -> str:
        return (f"{self.args[0]} with no scope would act on every job: give task=, queue= or "
                f"older_than= (CLI: --task/--queue/--older-than), or all=True (CLI: --all)")


class UnsupportedStore(AdminError, NotImplementedError):
    """The app's store has no admin implementation."""


# -- values ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Query:
    """Filters of a listing (all optional; ``text`` is a case-insensitive substring of the
    task name, the decoded args/kwargs or the error type, message and traceback)."""

    task: str | None = None
    queue: str | None = None
    since_ms: int | None = None
    until_ms: int | None = None
    text: str | None = None
    #: Search ``text`` in the first this many records (of those the other filters keep, in
    #: the listing's order) only; None: in all of them.
    text_limit: int | None = None
    #: Oldest first instead of newest first.
    oldest_first: bool = False
    #: Examine at most this many waiting jobs where a store walks its indexes to apply the
    #: task and time filters (Redis, over ORDERED_MAX waiting jobs: docs/admin.md "Cost");
    #: None: all of them. A store with an index for the filter examines nothing.
    walk_limit: int | None = None

    def matches_time(self, at_ms: int) -> bool:
        return ((self.since_ms is None or at_ms >= self.since_ms)
                and (self.until_ms is None or at_ms <= self.until_ms))


@dataclass(frozen=True)
class Scope:
    """What a bulk operation acts on: jobs of ``task``, of ``queue``, finished at least
    ``older_than_ms`` ago, and (``ids``) only these task ids, e.g. the rows an operator
    selected. Empty = every job of the state (needs ``all=True``)."""

    task: str | None = None
    queue: str | None = None
    older_than_ms: int | None = None
    ids: tuple[str, ...] | None = None

    @property
    def empty(self) -> bool:
        return (self.task is None and self.queue is None and self.older_than_ms is None
                and self.ids is None)

    def matches(self, now_ms: int, name: str, queue: str, finished_ms: int | None) -> bool:
        """Whether a record (task name, queue, finish time) is in the scope (ids aside)."""
        return ((self.task is None or name == self.task)
                and (self.queue is None or queue == self.queue)
                and (self.older_than_ms is None
                     or (finished_ms or 0) <= now_ms - self.older_than_ms))


@dataclass(frozen=True)
class JobSummary:
    """One row of a listing."""

    id: str
    state: str
    name: str
    queue: str
    #: Time of the current state (ms since the epoch): finished, started or enqueued.
    at_ms: int
    enqueued_ms: int
    due_ms: int
    deliveries: int
    reason: str = ""
    exc_type: str = ""
    exc_message: str = ""
    #: Celery's ``argsrepr``/``kwargsrepr`` headers (or the decoded args) for display.
    args_repr: str = ""
    #: Running in the store but not started by its worker yet (prefetched: "reserved");
    #: ``at_ms`` is then the claim's time. See ``JobRecord.start_mark``.
    reserved: bool = False
    #: Blocked by its cluster rate limit (window full), not by a concurrency limit.
    rate_limited: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class JobDetail:
    """Everything the store knows about one job, the message decoded."""

    summary: JobSummary
    args: list[Any] | None
    kwargs: dict[str, Any] | None
    headers: dict[str, Any]
    properties: dict[str, Any]
    #: Why the message could not be decoded ('' when it could).
    decode_error: str
    raw_message: str
    max_deliveries: int
    started_ms: int | None
    finished_ms: int | None
    worker: str
    traceback: str
    history: list[dict[str, Any]]
    unique_lock: str
    unique_window: str
    unique_ttl_ms: int
    #: Who holds ``unique_lock`` now (None: free).
    unique_holder: str | None
    concurrency_group: str
    concurrency_limit: int
    priority: int

    @property
    def id(self) -> str:
        return self.summary.id

    @property
    def state(self) -> str:
        return self.summary.state

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        summary = out.pop("summary")
        return {**summary, **out}


@dataclass(frozen=True)
class Walked:
    """A listing a walk's bound (``Query.walk_limit``) cut short: the jobs it lists are those
    among the first ``examined`` of the ``of`` jobs of the state in its indexes (in the
    listing's order) that the filters keep; the rest were not looked at. ``building``: the
    walk stood in for the store's index of the filter, which is still being built (Redis:
    the dead letters of a store an earlier release wrote, ``stores/redis/listing_index.py``)."""

    examined: int
    of: int
    building: bool = False


@dataclass(frozen=True)
class Page:
    """One page of a listing, newest first."""

    items: list[JobSummary]
    total: int
    page: int
    per_page: int
    state: str
    #: A text search limited by ``text_limit`` that stopped short: the number of records it
    #: searched (the newest of those the other filters keep); None: it searched them all.
    searched: int | None = None
    #: The text was a job's id: ``items`` is that job (admin/search.py).
    by_id: bool = False
    #: Task names containing the text (admin/search.py), each a ``task`` filter to list.
    task_names: tuple[str, ...] = ()
    #: The walk's bound cut the listing short (Query.walk_limit); None: nothing was left out.
    walked: Walked | None = None

    @property
    def capped(self) -> bool:
        """Whether ``total`` only says "more than COUNT_CAP" (admin/capped.py)."""
        return is_capped(self.total)

    @property
    def pages(self) -> int:
        """The pages of the listing; of a capped one, those known: this one, and the next
        while this one is full."""
        known = math.ceil(self.total / self.per_page) if self.per_page else 0
        if not self.capped:
            return known
        return max(known, self.page + (len(self.items) >= self.per_page))

    def to_dict(self) -> dict[str, Any]:
        return {"state": self.state, "total": self.total, "capped": self.capped,
                "page": self.page, "per_page": self.per_page, "pages": self.pages,
                "searched": self.searched, "by_id": self.by_id,
                "walked": None if self.walked is None else asdict(self.walked),
                "task_names": list(self.task_names),
                "items": [item.to_dict() for item in self.items]}


@dataclass(frozen=True)
class Found:
    """What a text search found: a page of rows, how many match, the task names of the
    candidates it looked at, and whether ``Query.text_limit`` cut it short."""

    items: list[JobSummary]
    total: int
    names: frozenset[str]
    cut: bool
    #: The candidates were those of a walk its bound cut short (Query.walk_limit).
    walked: Walked | None = None


@dataclass(frozen=True)
class Counts:
    """Number of jobs per state. The store's ``running`` state is counted in two: ``running``
    (its task started, or not known: a worker of an earlier release) and ``reserved`` (claimed
    by a worker that has not started it: prefetched; docs/admin.md "Reserved and running")."""

    enqueued: int = 0
    scheduled: int = 0
    blocked: int = 0
    running: int = 0
    reserved: int = 0
    completed: int = 0
    failed: int = 0
    canceled: int = 0
    discarded: int = 0

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    def __getitem__(self, state: str) -> int:
        return int(getattr(self, state))


#: What :class:`Counts` tells apart, in order: the states, the running jobs in two.
COUNTED = tuple(f.name for f in fields(Counts))
#: The depths a :class:`QueueStatus` tells apart, in order.
QUEUE_COUNTED = ("enqueued", "scheduled", "blocked", "running", "reserved", "failed")


@dataclass(frozen=True)
class QueueStatus:
    """Depth of one queue by state (the running jobs in two, as in :class:`Counts`), and since
    when its oldest waiting job waits."""

    queue: str
    enqueued: int = 0
    scheduled: int = 0
    blocked: int = 0
    #: Claimed and started (``reserved``: claimed, not started yet; as in :class:`Counts`).
    running: int = 0
    reserved: int = 0
    failed: int = 0
    #: When the longest-waiting enqueued or blocked job became ready (ms; None: none waits).
    oldest_waiting_ms: int | None = None


@dataclass(frozen=True)
class GroupStatus:
    """A concurrency group: slots in use, its limit, jobs parked behind it."""

    group: str
    running: int
    limit: int
    blocked: int


@dataclass(frozen=True)
class Status:
    """The store at a glance (``celery-plus store-status``)."""

    now_ms: int
    counts: Counts
    queues: list[QueueStatus]
    groups: list[GroupStatus]
    oldest_waiting_ms: int | None
    #: Dead letters the per-queue counts leave out: the store's index of them by queue is
    #: still being built (Redis: a store an earlier release wrote); 0 on the other stores.
    unindexed: int = 0

    @property
    def dead_letters(self) -> int:
        return self.counts.failed

    @property
    def oldest_waiting_age_s(self) -> float | None:
        """How long the longest-waiting ready job has waited (seconds)."""
        if self.oldest_waiting_ms is None:
            return None
        return max(self.now_ms - self.oldest_waiting_ms, 0) / 1000.0

    def to_dict(self) -> dict[str, Any]:
        return {"now_ms": self.now_ms, "counts": self.counts.to_dict(),
                "dead_letters": self.dead_letters,
                "oldest_waiting_ms": self.oldest_waiting_ms,
                "oldest_waiting_age_s": self.oldest_waiting_age_s,
                "unindexed": self.unindexed,
                "queues": [asdict(q) for q in self.queues],
                "groups": [asdict(g) for g in self.groups]}


@dataclass(frozen=True)
class OpResult:
    """What an operation on one job did. ``changed`` False: a no-op (already done, or the job
    is in a state the operation does not apply to); ``state`` is the job's state after."""

    job_id: str
    action: str
    changed: bool
    state: str
    previous: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def message(self) -> str:
        if self.changed:
            return f"{self.job_id}: {self.previous} -> {self.state}"
        wanted = {"retry": "failed", "discard": "failed", "cancel": "waiting"}[self.action]
        return f"{self.job_id}: {self.state}, not {wanted}; nothing to {self.action}"


@dataclass(frozen=True)
class Throughput:
    """Jobs finished in the last ``window_s`` seconds, from the records' finish times.

    Records pruned by retention, and dead letters retried or discarded since, are not
    counted (see docs/admin.md)."""

    window_s: int
    completed: int
    failed: int

    @property
    def completed_per_min(self) -> float:
        return self.completed * 60 / self.window_s

    @property
    def failed_per_min(self) -> float:
        return self.failed * 60 / self.window_s

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "completed_per_min": self.completed_per_min,
                "failed_per_min": self.failed_per_min}


@dataclass(frozen=True)
class Activity:
    """Completed and failed jobs per time bucket (the overview's chart), oldest first."""

    since_ms: int
    bucket_s: int
    #: (completed, failed) per bucket.
    buckets: list[tuple[int, int]]

    def to_dict(self) -> dict[str, Any]:
        return {"since_ms": self.since_ms, "bucket_s": self.bucket_s,
                "buckets": [{"completed": c, "failed": f} for c, f in self.buckets]}


@dataclass(frozen=True)
class QueueLatency:
    """How long a queue's jobs waited from ready (enqueued or due) to started: the median
    and the 95th percentile of the newest ``samples`` jobs started in the window."""

    queue: str
    samples: int
    p50_s: float
    p95_s: float


def percentile(sorted_values: list[int], fraction: float) -> int:
    """Nearest-rank percentile of ascending ``sorted_values`` (not empty)."""
    rank = max(1, math.ceil(fraction * len(sorted_values)))
    return sorted_values[rank - 1]


def latencies(samples: Iterable[tuple[str, int]]) -> list[QueueLatency]:
    """Per-queue p50 / p95 of (queue, wait ms) samples."""
    per: dict[str, list[int]] = {}
    for queue, wait in samples:
        per.setdefault(queue, []).append(wait)
    out = []
    for queue, waits in sorted(per.items()):
        waits.sort()
        out.append(QueueLatency(queue, len(waits), percentile(waits, 0.5) / 1000,
                                percentile(waits, 0.95) / 1000))
    return out


@dataclass(frozen=True)
class WorkerLeases:
    """What the store knows of one worker: the running jobs it holds (``wk`` of their
    claims) and its newest lease deadline (a heartbeat or a claim pushes it forward)."""

    worker_id: str
    jobs: int
    lease_deadline_ms: int
    oldest_start_ms: int

    @property
    def host(self) -> str:
        return self.worker_id.rsplit(":", 2)[0] if self.worker_id.count(":") >= 2 else ""

    @property
    def pid(self) -> int | None:
        parts = self.worker_id.rsplit(":", 2)
        return int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None


@dataclass
class BulkResult:
    """What a bulk operation did."""

    action: str
    matched: int = 0
    changed: list[str] = field(default_factory=list)
    #: Retries refused because another job holds the unique key: (job id, holder id).
    conflicts: list[tuple[str, str]] = field(default_factory=list)
    #: Why it stopped before the end (the rest untouched), e.g. a request's deadline; None
    #: when it went through.
    stopped: str | None = None

    def note_retry(self, job_id: str, outcome: str, holder: str) -> None:
        """Record one job's answer to a retry: enqueued again, or refused because ``holder``
        holds its unique key (any other answer changed nothing)."""
        if outcome == "enqueued":
            self.changed.append(job_id)
        elif outcome == "conflict":
            self.conflicts.append((job_id, holder))

    def to_dict(self) -> dict[str, Any]:
        return {"action": self.action, "matched": self.matched, "changed": len(self.changed),
                "ids": self.changed,
                "conflicts": [{"id": j, "holder": h} for j, h in self.conflicts],
                "stopped": self.stopped}


class AdminStore(Protocol):
    """Admin operations on one durable store (one implementation per backend)."""

    def now_ms(self) -> int:
        """The store's clock (ms since the epoch)."""
        ...

    def counts(self) -> Counts: ...

    def jobs(self, state: str, query: Query, offset: int, limit: int
             ) -> tuple[list[JobSummary], int]:
        """Jobs in ``state`` matching ``query``, newest first: (``limit`` rows from
        ``offset``, total matching)."""
        ...

    def listing(self, state: str, query: Query, offset: int, limit: int
                ) -> tuple[list[JobSummary], int, Walked | None]:
        """:meth:`jobs` of a query without text, and whether ``query.walk_limit`` cut it
        short (how far the walk went; None: it did not)."""
        ...

    def search(self, state: str, query: Query, offset: int, limit: int) -> Found:
        """A ``query.text`` search: its page (as :meth:`jobs`), the task names of the
        candidates it looked at, whether ``query.text_limit`` cut it short."""
        ...

    def show(self, job_id: str) -> JobDetail | None: ...

    def retry(self, job_id: str) -> OpResult:
        """failed -> enqueued (see the module docstring). Raises JobNotFound, RetryConflict."""
        ...

    def discard(self, job_id: str) -> OpResult:
        """failed -> discarded. Raises JobNotFound."""
        ...

    def cancel(self, job_id: str) -> OpResult:
        """enqueued | scheduled | blocked -> canceled. Raises JobNotFound."""
        ...

    def discard_many(self, ids: Sequence[str]) -> list[OpResult]:
        """:meth:`discard` on each of ``ids`` (each job atomic; the jobs not found left
        out), in batches of :data:`BATCH` (one store call each where the store allows)."""
        ...

    def cancel_many(self, ids: Sequence[str]) -> list[OpResult]:
        """:meth:`cancel` on each of ``ids``, as :meth:`discard_many`."""
        ...

    def retry_many(self, scope: Scope, all: bool = False,
                   result: BulkResult | None = None) -> BulkResult:
        """Retry the failed jobs in ``scope``; conflicts are reported, not raised.
        ``result`` (returned) is filled batch by batch: after an interruption it says what
        was done."""
        ...

    def purge(self, state: str, scope: Scope, all: bool = False,
              result: BulkResult | None = None) -> BulkResult:
        """Delete the records of ``state`` (one of :data:`PURGEABLE`) in ``scope``
        (``result`` as for ``retry_many``)."""
        ...

    def status(self) -> Status: ...

    def finished_since(self, since_ms: int) -> tuple[int, int]:
        """(completed, failed) records whose finish time is at or after ``since_ms``."""
        ...

    def finished_histogram(self, since_ms: int, bucket_ms: int, buckets: int
                           ) -> list[tuple[int, int]]:
        """(completed, failed) records finished in each of ``buckets`` consecutive buckets
        of ``bucket_ms`` from ``since_ms``."""
        ...

    def wait_samples(self, since_ms: int, limit: int) -> list[tuple[str, int]]:
        """(queue, ms from ready to started) of the newest ``limit`` jobs started at or
        after ``since_ms`` (running, completed or failed)."""
        ...

    def worker_leases(self) -> list[WorkerLeases]:
        """Per worker id, the running jobs it holds (see the module docstring)."""
        ...

    def close(self) -> None: ...


# -- helpers shared by the implementations -------------------------------------------------
def check_ids(action: str, ids: Sized) -> None:
    """The task ids of one bulk operation: at most :data:`MAX_PER_PAGE`."""
    if len(ids) > MAX_PER_PAGE:
        raise ValueError(f"{action} takes at most {MAX_PER_PAGE} task ids at once "
                         f"(got {len(ids)}): use a task/queue/age scope instead")


def check_state(state: str, allowed: tuple[str, ...] = STATES) -> str:
    if state not in allowed:
        raise ValueError(f"unknown state {state!r}: use one of {', '.join(allowed)}")
    return state


def time_field(state: str) -> str:
    """The :class:`JobRecord` attribute a listing of ``state`` orders and filters by
    (``finished_ms``, ``started_ms`` or ``enqueued_ms``)."""
    if state in rules.FINISHED:
        return "finished_ms"
    if state == "running":
        return "started_ms"
    return "enqueued_ms"


def time_of(state: str, record: JobRecord) -> int:
    """The time a listing of ``state`` orders ``record`` by (:func:`time_field`)."""
    return int(getattr(record, time_field(state)))


def batches(ids: Sequence[str], size: int = BATCH) -> Iterator[Sequence[str]]:
    """``ids`` in batches of ``size``: each batch of a bulk operation is one atomic step; a
    :func:`~celery_plus.model.checkpoint.checkpoint` before each (the work may stop there)."""
    for start in range(0, len(ids), size):
        checkpoint()
        yield ids[start:start + size]


@dataclass(frozen=True)
class Decoded:
    args: list[Any] | None
    kwargs: dict[str, Any] | None
    headers: dict[str, Any]
    properties: dict[str, Any]
    error: str


def decode_message(raw: str | bytes | None) -> Decoded:
    """Decode a stored kombu envelope: headers, properties and the task's args/kwargs.

    Celery protocol 2 bodies are JSON ``[args, kwargs, embed]`` (base64 when
    ``body_encoding`` is base64); protocol 1 bodies are a dict with ``args``/``kwargs``. A
    message that cannot be decoded (a malformed dead letter) gives ``error`` and no args.
    """
    text = as_text(raw)
    try:
        envelope = json.loads(text)
    except ValueError as exc:
        return Decoded(None, None, {}, {}, f"not a JSON kombu envelope: {exc}")
    if not isinstance(envelope, dict):
        return Decoded(None, None, {}, {}, "not a kombu envelope (not a JSON object)")
    raw_headers, raw_props = envelope.get("headers"), envelope.get("properties")
    headers: dict[str, Any] = raw_headers if isinstance(raw_headers, dict) else {}
    props: dict[str, Any] = raw_props if isinstance(raw_props, dict) else {}
    body = envelope.get("body")
    try:
        if props.get("body_encoding") == "base64" and isinstance(body, str):
            body = base64.b64decode(body)
        if isinstance(body, (bytes, bytearray)):
            ctype = envelope.get("content-type") or "application/json"
            if ctype != "application/json":
                return Decoded(None, None, headers, props,
                               f"body is {ctype}, only JSON bodies are decoded")
            body = json.loads(bytes(body).decode(envelope.get("content-encoding") or "utf-8"))
        elif isinstance(body, str):
            body = json.loads(body)
    except (ValueError, UnicodeDecodeError, TypeError) as exc:
        return Decoded(None, None, headers, props, f"body cannot be decoded: {exc}")
    if isinstance(body, list) and len(body) >= 2:
        args, kwargs = body[0], body[1]
    elif isinstance(body, dict) and ("args" in body or "kwargs" in body):
        args, kwargs = body.get("args"), body.get("kwargs")
    else:
        return Decoded(None, None, headers, props, "body is not a Celery task body")
    return Decoded(list(args) if isinstance(args, (list, tuple)) else None,
                   dict(kwargs) if isinstance(kwargs, dict) else None, headers, props, "")


def args_repr(decoded: Decoded) -> str:
    """A one-line rendering of the task's arguments for listings."""
    headers = decoded.headers
    if "argsrepr" in headers or "kwargsrepr" in headers:
        a, k = headers.get("argsrepr") or "()", headers.get("kwargsrepr") or "{}"
        return f"{a} {k}" if k not in ("{}", "") else str(a)
    if decoded.args is None and decoded.kwargs is None:
        return ""
    return json.dumps([decoded.args, decoded.kwargs], default=str)


def text_matches(needle: str, record: JobRecord) -> bool:
    """``needle`` (case-insensitive) in the task name, the decoded args/kwargs or the error
    fields."""
    low = needle.lower()
    for text in (record.name, record.exc_type, record.exc_message, record.traceback,
                 record.reason):
        if low in text.lower():
            return True
    decoded = decode_message(record.message)
    if decoded.error:
        return low in record.message.lower()
    haystack = json.dumps([decoded.args, decoded.kwargs], default=str, ensure_ascii=False)
    return low in haystack.lower() or low in args_repr(decoded).lower()


def text_page(candidates: Iterable[JobRecord], query: Query, offset: int,
              limit: int) -> tuple[list[JobSummary], int]:
    """A page of a text search over ``candidates`` and how many match (:func:`text_search`)."""
    page, matched, _ = text_search(candidates, query, offset, limit)
    return page, matched


def text_search(candidates: Iterable[JobRecord], query: Query, offset: int,
                limit: int) -> tuple[list[JobSummary], int, bool]:
    """A page of a text search over ``candidates``, in the listing's order, how many match,
    and whether ``query.text_limit`` cut it short (there was a candidate past it): each record
    is decoded once and dropped; only the page's rows become summaries (so the memory is a
    chunk of records and a page, however many match)."""
    assert query.text is not None
    page: list[JobSummary] = []
    matched = 0
    for n, rec in enumerate(candidates):
        if query.text_limit is not None and n >= query.text_limit:
            return page, matched, True
        if text_matches(query.text, rec):
            if offset <= matched < offset + limit:
                page.append(summary_from_record(rec))
            matched += 1
    return page, matched, False


def _bounded(value: Any, limit: int = LIST_TEXT) -> str:
    text = as_text(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _preview(rec: JobRecord) -> str:
    """The arguments preview of a listing row (see :data:`PREVIEW_BYTES`)."""
    msg = rec.message
    if msg and len(msg) <= PREVIEW_BYTES:
        return _bounded(args_repr(decode_message(msg)))
    size = rec.message_size or len(msg)
    if not size:
        return ""
    return f"(a message of {size:,} bytes: open the job to see its arguments)"


def summary_from_record(rec: JobRecord, bounded: bool = True) -> JobSummary:
    """A listing row from a record (a listing row's ``message_size``: the size of a message
    the store did not send); ``bounded``: texts cut to LIST_TEXT."""
    cut = _bounded if bounded else as_text
    return JobSummary(
        id=rec.id, state=rec.state, name=cut(rec.name), queue=cut(rec.queue),
        at_ms=time_of(rec.state, rec), enqueued_ms=rec.enqueued_ms, due_ms=rec.due_ms,
        deliveries=rec.deliveries, reason=cut(rec.reason), exc_type=cut(rec.exc_type),
        exc_message=cut(rec.exc_message), args_repr=_preview(rec), reserved=rec.reserved,
        rate_limited=rec.state == "blocked" and rec.rate_parked)


def detail_from_record(rec: JobRecord, holder: str | None) -> JobDetail:
    """The full view of a record; ``holder``: who holds its unique key now."""
    decoded = decode_message(rec.message)
    return JobDetail(
        summary=summary_from_record(rec, bounded=False), args=decoded.args,
        kwargs=decoded.kwargs, headers=decoded.headers, properties=decoded.properties,
        decode_error=decoded.error, raw_message=rec.message,
        max_deliveries=rec.max_deliveries, started_ms=rec.started_ms or None,
        finished_ms=rec.finished_ms or None, worker=rec.worker, traceback=rec.traceback,
        history=list(rec.history), unique_lock=rec.unique_lock,
        unique_window=rec.unique_window, unique_ttl_ms=rec.unique_ttl_ms,
        unique_holder=holder, concurrency_group=rec.concurrency_group,
        concurrency_limit=rec.concurrency_limit, priority=rec.score // rules.PRIORITY_FACTOR)
