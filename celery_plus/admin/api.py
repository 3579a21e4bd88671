"""``celery_plus.admin``: the dead-letter and job admin as a Python API (DESIGN §4).

::

    from celery_plus import admin

    admin.counts(app)                               # Counts per state
    admin.jobs(app, "failed", task="proj.send", text="timeout", page=1, per_page=50)
    admin.show(app, task_id)                        # message, attempts, history, traceback
    admin.retry(app, task_id)                       # failed -> enqueued, same task id
    admin.discard(app, task_id)                     # failed -> discarded
    admin.cancel(app, task_id)                      # enqueued | scheduled | blocked -> canceled
    admin.retry_many(app, task="proj.send", older_than=3600)
    admin.retry_many(app, ids=[id1, id2])           # chosen dead letters
    admin.purge(app, state="failed", queue="mail", all=False)
    admin.status(app)                               # per-queue depth, groups, oldest waiting
    admin.throughput(app)                           # completed / failed in the last 5 and 60 min
    admin.schedules(app)                            # beat's entries: last / next tick, paused
    admin.pause_schedule(app, "nightly-report")     # its ticks pass without jobs
    admin.resume_schedule(app, "nightly-report")
    admin.pause_queue(app, "mail")                  # workers claim none of its jobs
    admin.resume_queue(app, "mail")                 # its jobs are claimable at once
    admin.paused_queues(app)                        # {"mail": paused at (store ms)}
    admin.queue_history(app, "mail", range_s=3600)  # enqueued and oldest wait, per minute

Each function opens the app's store (its ``broker_url``, resolved by the transport's
``open_store`` with the app's ``plus_*`` settings), does one operation and closes it;
``with admin.connect(app) as a: ...`` keeps one store open for several calls. ``app`` may
also be a broker URL (``"plus+redis://..."``; default settings).

Semantics (atomicity, idempotency, the retry conflict, what discard keeps) are the
:class:`~celery_plus.model.admin.AdminStore` rules; see ``docs/admin.md``. A cancel also marks
the task ``REVOKED`` in the app's result backend (when it has one), so
``AsyncResult(task_id).state`` says what happened, as it does after Celery's ``revoke``.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, TypeVar

from celery_plus.admin import filter_actions, grouped_errors, search, task_stats
from celery_plus.admin.deadline import reporting
from celery_plus.admin.params import MAX_DURATION_S, check_page, check_text
from celery_plus.admin.queue_history import QueueHistory, read_history
from celery_plus.admin.queue_pause import QueuePause, set_queue_paused
from celery_plus.admin.queue_pause import paused_queues as _paused_queues
from celery_plus.admin.schedules import Schedule, forget, list_schedules, set_paused
from celery_plus.model.admin import (
    MAX_PER_PAGE,
    STATES,
    Activity,
    AdminError,
    AdminStore,
    BulkResult,
    Counts,
    JobDetail,
    JobNotFound,
    OpResult,
    Page,
    Query,
    QueueLatency,
    Scope,
    Status,
    Throughput,
    UnsupportedStore,
    WorkerLeases,
    batches,
    check_ids,
    check_state,
    latencies,
)
from celery_plus.model.error_groups import ErrorGroups
from celery_plus.model.store import Backend, WorkerBeat
from celery_plus.stores.registry import admin_for, open_store, store_location

logger = logging.getLogger(__name__)
T = TypeVar("T")

Moment = dt.datetime | dt.timedelta | float | int | None
Age = dt.timedelta | float | int | None
#: The overview's throughput windows: the last 5 and 60 minutes.
WINDOWS = (300, 3600)
#: Why an admin cancel revoked a task (the result backend's ``TaskRevokedError``).
CANCEL_REASON = "canceled by the celery-plus admin"
#: Listing orders.
ORDERS = ("newest", "oldest")
#: Jobs per-queue latency looks at (the newest started).
LATENCY_SAMPLES = 5000
#: Characters of a task's result kept for display.
RESULT_TEXT = 100_000
#: Longest task id the admin looks up.
MAX_ID = 4096


def check_id(task_id: str) -> str:
    """A task id as every store can look it up (no NUL, valid UTF-8, bounded)."""
    return check_text("task id", task_id, MAX_ID) or ""


@dataclass(frozen=True)
class TaskResult:
    """A task's entry in the app's result backend: its state (``SUCCESS``, ``FAILURE``,
    ``REVOKED`` ...), its result as text, when it was stored; ``error`` if it could not be
    read."""

    state: str
    result: str
    date_done: str
    error: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _result_text(value: Any) -> str:
    if value is None:
        return ""
    try:
        text = json.dumps(value, default=repr)
    except (TypeError, ValueError):
        text = repr(value)
    return text[:RESULT_TEXT]


def connect(app: Any) -> Admin:
    """An :class:`Admin` on ``app``'s store (a Celery app, or a ``plus+...`` broker URL).

    For an app on a non-plus broker, its coordination store (``plus_coordination_url``).
    """
    if not isinstance(app, str) and hasattr(app, "plus_config"):
        from celery_plus.coordination.admin import coordinated_admin_store

        coordinated = coordinated_admin_store(app)
        if coordinated is not None:
            return Admin(coordinated, app=app)
    url, config = store_location(app)
    backend = open_store(url, config)
    try:
        return Admin(admin_for(backend, owns_backend=True),
                     app=None if isinstance(app, str) else app)
    except BaseException:
        backend.close()
        raise


#: Moments are clamped to this many ms either side of the epoch (every store's integers).
_MOMENT_BOUND_MS = 2**53


def _ms(value: dt.timedelta | float | int) -> int:
    seconds = value.total_seconds() if isinstance(value, dt.timedelta) else float(value)
    if not 0 <= seconds <= MAX_DURATION_S:
        raise ValueError(f"an age must be from 0 to 100 years in seconds (got {value!r})")
    return round(seconds * 1000)


def _moment_ms(value: Moment, now_ms: int) -> int | None:
    """A time filter in ms since the epoch: a datetime (naive = UTC), epoch seconds, or a
    timedelta meaning that long before now (the store's clock)."""
    if value is None:
        return None
    if isinstance(value, dt.timedelta):
        return now_ms - _ms(value)
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.timezone.utc)
        ms = value.timestamp() * 1000
    else:
        ms = float(value) * 1000
    if ms != ms:  # NaN
        raise ValueError(f"not a time: {value!r}")
    return round(max(-_MOMENT_BOUND_MS, min(_MOMENT_BOUND_MS, ms)))


def _scope(task: str | None, queue: str | None, older_than: Age,
           ids: Iterable[str] | None = None) -> Scope:
    check_text("task", task)
    check_text("queue", queue)
    if ids is not None:
        ids = [check_id(i) for i in ids]
    return Scope(task=task or None, queue=queue or None,
                 older_than_ms=None if older_than is None else _ms(older_than),
                 ids=None if ids is None else tuple(dict.fromkeys(ids)))


class Admin:
    """The admin operations on one open store (see the module docstring).

    ``app`` (optional) is the Celery app whose result backend a cancel marks ``REVOKED``."""

    def __init__(self, store: AdminStore, app: Any = None) -> None:
        self.store = store
        self.app = app

    def __enter__(self) -> Admin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.store.close()

    def counts(self) -> Counts:
        """How many jobs are in each state."""
        return self.store.counts()

    def jobs(self, state: str = "failed", *, task: str | None = None,
             queue: str | None = None, since: Moment = None, until: Moment = None,
             text: str | None = None, text_limit: int | None = None, page: int = 1,
             per_page: int = 50, order: str = "newest", walk_limit: int | None = None) -> Page:
        """One page of the jobs in ``state``, newest first (``order="oldest"``: oldest
        first), filtered by task name, queue, time of the state (``since``/``until``) and
        ``text`` in the args or the error.

        A ``text`` that is a job's id (in this state and the other filters) gives that job
        alone (``Page.by_id``; one record read). Otherwise the text is searched in the task
        name, the arguments and the error of each candidate, whose message it decodes;
        ``text_limit`` makes it search the first that many candidates only (``Page.searched``
        says when that cut it short), and ``Page.task_names`` lists the task names containing
        it (admin/search.py). ``walk_limit``: where a store walks its indexes to apply the
        task or time filter (Redis, over 10,000 waiting jobs), look at the first that many
        jobs only (``Page.walked`` says when that cut the listing short); None: at all."""
        check_state(state)
        check_page(page)
        if not 1 <= per_page <= MAX_PER_PAGE:
            raise ValueError(f"per_page must be between 1 and {MAX_PER_PAGE} (got {per_page})")
        for name, limit in (("text_limit", text_limit), ("walk_limit", walk_limit)):
            if limit is not None and limit < 1:
                raise ValueError(f"{name} must be >= 1 (got {limit})")
        if order not in ORDERS:
            raise ValueError(f"order must be one of {', '.join(ORDERS)} (got {order!r})")
        for name, value in (("task", task), ("queue", queue), ("text", text)):
            check_text(name, value)
        relative = any(isinstance(v, dt.timedelta) for v in (since, until))
        now = self.store.now_ms() if relative else 0
        query = Query(task=task or None, queue=queue or None, since_ms=_moment_ms(since, now),
                      until_ms=_moment_ms(until, now), text=text or None,
                      text_limit=text_limit if text else None,
                      oldest_first=order == "oldest", walk_limit=walk_limit)
        if not query.text:
            items, total, walked = self.store.listing(state, query, (page - 1) * per_page,
                                                      per_page)
            return Page(items=items, total=total, page=page, per_page=per_page, state=state,
                        walked=walked)
        hit = search.by_id(self.store, state, query)
        if hit is not None:
            return Page(items=[hit] if page == 1 else [], total=1, page=page,
                        per_page=per_page, state=state, by_id=True)
        found = self.store.search(state, query, (page - 1) * per_page, per_page)
        return Page(items=found.items, total=found.total, page=page, per_page=per_page,
                    state=state, searched=query.text_limit if found.cut else None,
                    task_names=tuple(search.task_names(self.app, found.names, query.text)),
                    walked=found.walked)

    def show(self, task_id: str) -> JobDetail:
        """Everything about one job; raises :class:`JobNotFound`."""
        detail = self.store.show(check_id(task_id))
        if detail is None:
            raise JobNotFound(task_id)
        return detail

    def retry(self, task_id: str) -> OpResult:
        """Retry a dead letter (same task id); raises JobNotFound or RetryConflict."""
        return self.store.retry(check_id(task_id))

    def discard(self, task_id: str) -> OpResult:
        """Discard a dead letter (kept as ``discarded`` until pruned)."""
        return self.store.discard(check_id(task_id))

    def cancel(self, task_id: str) -> OpResult:
        """Cancel a job that waits (enqueued, scheduled or blocked); mark it ``REVOKED`` in
        the app's result backend."""
        result = self.store.cancel(check_id(task_id))
        if result.changed:
            self._mark_revoked(task_id)
        return result

    def _mark_revoked(self, task_id: str) -> None:
        """Record the cancel in the result backend, as Celery's ``revoke`` would. The job is
        canceled in the store already: a result backend that fails is logged, not raised."""
        if self.app is None:
            return
        from celery.backends.base import DisabledBackend

        try:
            backend = self.app.backend
            if isinstance(backend, DisabledBackend):
                return
            backend.mark_as_revoked(task_id, reason=CANCEL_REASON)
        except Exception:
            logger.exception("job %s was canceled, but its result backend could not be "
                             "marked REVOKED", task_id)

    def discard_many(self, ids: Sequence[str]) -> BulkResult:
        """Discard each of these dead letters (each one atomic, a batch one store call where
        the store allows; not found: skipped)."""
        return self._each("discard", ids, self.store.discard_many)

    def cancel_many(self, ids: Sequence[str]) -> BulkResult:
        """Cancel each of these waiting jobs (each one atomic and marked ``REVOKED``)."""
        return self._each("cancel", ids, self.store.cancel_many, self._mark_revoked)

    @staticmethod
    def _each(action: str, ids: Sequence[str],
              operation: Callable[[Sequence[str]], list[OpResult]],
              then: Callable[[str], None] | None = None) -> BulkResult:
        """``operation`` on ``ids`` a batch at a time (``then`` on each job it changed);
        stopped by a request's deadline, :class:`~celery_plus.admin.deadline.Stopped` says
        what it did (as :meth:`retry_many`)."""
        unique = list(dict.fromkeys(check_id(i) for i in ids))
        check_ids(action, unique)
        with reporting(BulkResult(action)) as result:
            for chunk in batches(unique):
                for done in operation(chunk):
                    result.matched += 1
                    if done.changed:
                        result.changed.append(done.job_id)
                        if then is not None:
                            then(done.job_id)
            return result

    def retry_many(self, *, task: str | None = None, queue: str | None = None,
                   older_than: Age = None, ids: Iterable[str] | None = None,
                   all: bool = False, result: BulkResult | None = None) -> BulkResult:
        """Retry the dead letters of ``task`` / ``queue`` / dead for at least ``older_than``
        (seconds or timedelta) / among ``ids``; every dead letter only with ``all=True``.

        ``result`` (returned) is filled in batch by batch: if the call is interrupted
        (Ctrl-C), it says how many were retried already; stopped by a request's deadline
        (admin/deadline.py), :class:`~celery_plus.admin.deadline.Stopped` carries it, its
        ``stopped`` saying why."""
        with reporting(result or BulkResult("retry")) as result:
            return self.store.retry_many(_scope(task, queue, older_than, ids), all=all,
                                         result=result)

    def purge(self, state: str = "failed", *, task: str | None = None,
              queue: str | None = None, older_than: Age = None,
              ids: Iterable[str] | None = None, all: bool = False,
              result: BulkResult | None = None) -> BulkResult:
        """Delete the finished records of ``state`` (failed, completed, canceled, discarded)
        in scope (``ids``: only these); every one of them only with ``all=True``
        (``result`` as for :meth:`retry_many`)."""
        with reporting(result or BulkResult("purge")) as result:
            return self.store.purge(state, _scope(task, queue, older_than, ids), all=all,
                                    result=result)

    def status(self) -> Status:
        """Per-queue depth by state, concurrency groups, dead letters, oldest waiting job."""
        return self.store.status()

    def activity(self, range_s: int = 3600, buckets: int = 60) -> Activity:
        """Completed and failed jobs in ``buckets`` equal buckets over the last ``range_s``
        seconds (the buckets end at the next whole bucket from now)."""
        if range_s <= 0 or not 1 <= buckets <= 1000 or range_s % buckets:
            raise ValueError(f"activity over {range_s} s in {buckets} buckets: a positive "
                             "range divisible into 1 to 1000 buckets")
        bucket_ms = range_s // buckets * 1000
        now = self.store.now_ms()
        end = (now // bucket_ms + 1) * bucket_ms
        since = end - bucket_ms * buckets
        return Activity(since, bucket_ms // 1000,
                        self.store.finished_histogram(since, bucket_ms, buckets))

    def latency(self, window_s: int = 3600, samples: int = LATENCY_SAMPLES
                ) -> list[QueueLatency]:
        """Per queue, how long jobs started in the last ``window_s`` waited to start (the
        newest ``samples`` of them): median and 95th percentile."""
        since = self.store.now_ms() - window_s * 1000
        return latencies(self.store.wait_samples(since, samples))

    def runtime(self, window_s: int = 3600, samples: int = LATENCY_SAMPLES
                ) -> list[QueueLatency]:
        """Per queue, how long jobs completed in the last ``window_s`` ran (from their
        start: docs/admin.md "Reserved and running"), the newest ``samples`` of them:
        median and 95th percentile."""
        since = self.store.now_ms() - window_s * 1000
        rows = getattr(self.store, "runtime_samples", None)
        return latencies(rows(since, samples)) if rows is not None else []

    def worker_leases(self) -> list[WorkerLeases]:
        """Per worker id, the running jobs it holds and its newest lease deadline."""
        return self.store.worker_leases()

    def worker_records(self) -> list[WorkerBeat]:
        """The Celery workers' own records (each written every heartbeat interval by its
        worker: node name, host, pid, queues, first and last beat), by node name."""
        backend: Any = getattr(self.store, "backend", None)
        beats = getattr(backend, "worker_beats", None)
        return list(beats()) if beats is not None else []

    def schedules(self) -> list[Schedule]:
        """Beat's schedule entries in the store, by name (docs/schedules.md)."""
        return list_schedules(self._backend())

    def pause_schedule(self, name: str) -> Schedule:
        """Pause entry ``name``: its ticks pass without jobs. Raises ScheduleNotFound."""
        return set_paused(self._backend(), name, True)

    def resume_schedule(self, name: str) -> Schedule:
        """Resume entry ``name`` from its next tick. Raises ScheduleNotFound."""
        return set_paused(self._backend(), name, False)

    def pause_queue(self, queue: str) -> QueuePause:
        """Pause ``queue`` for every worker: once this returns, no claim takes its jobs
        (running ones finish); publishes to it are kept and wait."""
        return set_queue_paused(self._backend(), queue, True)

    def resume_queue(self, queue: str) -> QueuePause:
        """Resume ``queue``: its waiting jobs are claimable at once."""
        return set_queue_paused(self._backend(), queue, False)

    def paused_queues(self) -> dict[str, int]:
        """Every paused queue and when it was paused (store ms), by name."""
        return _paused_queues(self._backend())

    def forget_schedule(self, name: str) -> None:
        """Delete entry ``name`` from the store. Raises ScheduleNotFound."""
        forget(self._backend(), name)

    def _backend(self) -> Backend:
        backend = getattr(self.store, "backend", None)
        if backend is None:
            raise UnsupportedStore("this admin store keeps no schedules or paused queues")
        return backend

    @property
    def lease_ms(self) -> int | None:
        """The lease length of this store's claims as this app configures it."""
        backend = getattr(self.store, "backend", None)
        value = getattr(backend, "lease_ms", None)
        return int(value) if value else None

    def result(self, task_id: str) -> TaskResult | None:
        """The task's state and result in the app's result backend (None: no backend)."""
        if self.app is None:
            return None
        from celery.backends.base import DisabledBackend

        backend = self.app.backend
        if isinstance(backend, DisabledBackend):
            return None
        try:
            meta = backend.get_task_meta(check_id(task_id))
        except Exception as exc:
            return TaskResult(state="", result="", date_done="",
                              error=f"the result backend could not be read: {exc!r}")
        done = meta.get("date_done")
        return TaskResult(state=str(meta.get("status") or ""),
                          result=_result_text(meta.get("result")),
                          date_done="" if done is None else str(done), error="")

    def terminate(self, task_id: str, signal: str = "SIGTERM") -> OpResult:
        """Stop a running job: Celery's ``revoke(terminate=True)`` (the worker running it
        kills the pool process running it; prefork and the other pools that can). A job that
        is not running is left alone (``changed`` False)."""
        if self.app is None:
            raise AdminError("stopping a running job needs the Celery app (its remote "
                             "control), not a broker URL")
        detail = self.show(task_id)
        if detail.state != "running":
            return OpResult(task_id, "terminate", False, detail.state, detail.state)
        self.app.control.revoke(task_id, terminate=True, signal=signal)
        return OpResult(task_id, "terminate", True, "running", "running")

    def task_breakdown(self, window_s: int = 3600,
                       sample: int = task_stats.SAMPLE) -> task_stats.TaskBreakdown:
        """Per task name: waiting, running, succeeded, failed, dead, failure rate and runtime
        p50 / p95 over the last ``window_s`` seconds (bounded samples: admin/task_stats.py)."""
        return task_stats.breakdown(self, window_s, sample)

    def queue_history(self, queue: str | None = None, range_s: int = 3600) -> QueueHistory:
        """Jobs enqueued and the oldest one's wait, per minute over the last ``range_s``
        seconds (at most a day), of ``queue`` or of every queue (docs/admin.md, "Queue depth
        and wait over time")."""
        return read_history(self.store, queue, range_s)

    def act_on_filter(self, action: str, state: str, *, task: str | None = None,
                      queue: str | None = None, since: Moment = None, until: Moment = None,
                      text: str | None = None, result: BulkResult | None = None
                      ) -> BulkResult:
        """Retry / discard / cancel / purge every job of ``state`` that matches a listing's
        filters, in bounded batches (admin/filter_actions.py; ``result`` as for
        :meth:`retry_many`)."""
        since_ms, until_ms = self._range(since, until)
        with reporting(result or BulkResult(action)) as result:
            return filter_actions.act_on_filter(self, action, state, task=task, queue=queue,
                                                since_ms=since_ms, until_ms=until_ms,
                                                text=text, result=result)

    def count_matching(self, state: str, *, task: str | None = None,
                       queue: str | None = None, since: Moment = None, until: Moment = None,
                       text: str | None = None) -> int:
        """How many jobs of ``state`` a listing's filters match now."""
        since_ms, until_ms = self._range(since, until)
        return filter_actions.count_matching(self, state, task=task, queue=queue,
                                             since_ms=since_ms, until_ms=until_ms, text=text)

    def _range(self, since: Moment, until: Moment) -> tuple[int | None, int | None]:
        now = self.store.now_ms()
        return _moment_ms(since, now), _moment_ms(until, now)

    # -- errors grouped by type and message (admin/grouped_errors.py) -----------------------
    def error_groups(self, limit: int = 100) -> ErrorGroups:
        """The dead letters grouped by exception type and message, the largest first."""
        return grouped_errors.groups(self, limit)

    def error_group_jobs(self, exc_type: str, message: str, page: int = 1,
                         per_page: int = 50, order: str = "newest") -> Page:
        """One page of a group's dead letters."""
        return grouped_errors.group_jobs(self, exc_type, message, page, per_page, order)

    def retry_group(self, exc_type: str, message: str,
                    result: BulkResult | None = None) -> BulkResult:
        """Retry every dead letter of the group (in batches; ``result`` as for retry_many)."""
        with reporting(result or BulkResult("retry")) as result:
            return grouped_errors.act_on_group(self, "retry", exc_type, message, result)

    def discard_group(self, exc_type: str, message: str,
                      result: BulkResult | None = None) -> BulkResult:
        """Discard every dead letter of the group (in batches; ``result`` as for
        :meth:`retry_many`)."""
        with reporting(result or BulkResult("discard")) as result:
            return grouped_errors.act_on_group(self, "discard", exc_type, message, result)

    def throughput(self, windows: Sequence[int] = WINDOWS) -> list[Throughput]:
        """Completed and failed jobs of the last ``windows`` seconds (default 5 and 60
        minutes), from the finish times of the records the store keeps."""
        now = self.store.now_ms()
        out = []
        for window in windows:
            if window <= 0:
                raise ValueError(f"a throughput window must be positive (got {window})")
            completed, failed = self.store.finished_since(now - window * 1000)
            out.append(Throughput(int(window), completed, failed))
        return out


# -- one call, one store ------------------------------------------------------------------
def counts(app: Any) -> Counts:
    with connect(app) as a:
        return a.counts()


def jobs(app: Any, state: str = "failed", **filters: Any) -> Page:
    with connect(app) as a:
        return a.jobs(state, **filters)


def show(app: Any, task_id: str) -> JobDetail:
    with connect(app) as a:
        return a.show(task_id)


def retry(app: Any, task_id: str) -> OpResult:
    with connect(app) as a:
        return a.retry(task_id)


def discard(app: Any, task_id: str) -> OpResult:
    with connect(app) as a:
        return a.discard(task_id)


def cancel(app: Any, task_id: str) -> OpResult:
    with connect(app) as a:
        return a.cancel(task_id)


def retry_many(app: Any, *, task: str | None = None, queue: str | None = None,
               older_than: Age = None, ids: Iterable[str] | None = None,
               all: bool = False) -> BulkResult:
    with connect(app) as a:
        return a.retry_many(task=task, queue=queue, older_than=older_than, ids=ids, all=all)


def purge(app: Any, state: str = "failed", *, task: str | None = None,
          queue: str | None = None, older_than: Age = None,
          ids: Iterable[str] | None = None, all: bool = False) -> BulkResult:
    with connect(app) as a:
        return a.purge(state, task=task, queue=queue, older_than=older_than, ids=ids, all=all)


def status(app: Any) -> Status:
    with connect(app) as a:
        return a.status()


def schedules(app: Any) -> list[Schedule]:
    with connect(app) as a:
        return a.schedules()


def pause_schedule(app: Any, name: str) -> Schedule:
    with connect(app) as a:
        return a.pause_schedule(name)


def resume_schedule(app: Any, name: str) -> Schedule:
    with connect(app) as a:
        return a.resume_schedule(name)


def _once(app: Any, operation: Callable[[Admin], T]) -> T:
    """``operation`` on the app's admin, opened for it and closed afterwards."""
    with connect(app) as a:
        return operation(a)


def pause_queue(app: Any, queue: str) -> QueuePause:
    return _once(app, lambda a: a.pause_queue(queue))


def resume_queue(app: Any, queue: str) -> QueuePause:
    return _once(app, lambda a: a.resume_queue(queue))


def paused_queues(app: Any) -> dict[str, int]:
    return _once(app, Admin.paused_queues)


def error_groups(app: Any, limit: int = 100) -> ErrorGroups:
    return _once(app, lambda a: a.error_groups(limit))


def retry_group(app: Any, exc_type: str, message: str) -> BulkResult:
    return _once(app, lambda a: a.retry_group(exc_type, message))


def discard_group(app: Any, exc_type: str, message: str) -> BulkResult:
    return _once(app, lambda a: a.discard_group(exc_type, message))


def task_breakdown(app: Any, window_s: int = 3600) -> task_stats.TaskBreakdown:
    return _once(app, lambda a: a.task_breakdown(window_s))


def queue_history(app: Any, queue: str | None = None, range_s: int = 3600) -> QueueHistory:
    return _once(app, lambda a: a.queue_history(queue, range_s))


def throughput(app: Any, windows: Sequence[int] = WINDOWS) -> list[Throughput]:
    with connect(app) as a:
        return a.throughput(windows)


__all__ = ["STATES", "Admin", "admin_for", "cancel", "connect", "counts", "discard",
           "discard_group", "error_groups", "jobs", "pause_queue", "paused_queues", "purge",
           "queue_history",
           "resume_queue", "retry", "retry_group", "retry_many", "show", "status",
           "task_breakdown", "throughput"]
