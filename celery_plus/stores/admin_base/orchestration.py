"""The admin operations written once, over a few atomic primitives each store provides.

:class:`StoreAdmin` is every store's :class:`~celery_plus.model.admin.AdminStore`: it checks
states and scopes, picks a bulk operation's candidates and changes them a batch at a time,
turns the store's replies into :class:`OpResult` / :class:`BulkResult` values, raises
:class:`RetryConflict`, runs a listing (a page, or a text search over the store's records)
and assembles counts, status, activity, latency and leases from the rows the store reads. A
store's admin (``stores/*/admin.py``) supplies only its own statements (Lua scripts, SQL,
steps under the in-process store's lock): the primitives below.

A change primitive is ONE atomic step in the store that re-checks each job's state (and the
bulk scope) itself and answers per job ``(job id, outcome, extra)``: ``outcome`` is the new
state (``extra`` the previous one), ``noop`` / ``skipped`` (``extra`` the current state),
``missing``, or for a retry ``conflict`` (``extra`` the holder of the unique key); see
:func:`op_result`. Listings and reads speak :class:`~celery_plus.model.job_record.JobRecord`
(each store's admin builds it from its own fields).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import ClassVar, Generic, TypeVar

from celery_plus.model.admin import (
    PURGEABLE,
    BulkResult,
    Counts,
    Found,
    JobDetail,
    JobNotFound,
    JobSummary,
    OpResult,
    Query,
    RetryConflict,
    Scope,
    Status,
    UnscopedOperation,
    Walked,
    WorkerLeases,
    batches,
    check_ids,
    check_state,
    detail_from_record,
    summary_from_record,
    text_page,
    text_search,
)
from celery_plus.model.store import Backend
from celery_plus.stores.admin_base.aggregates import (
    StatusRows,
    counts_from_rows,
    histogram,
    leases_from_rows,
    newest_waits,
    status_from_rows,
)
from celery_plus.stores.admin_base.listing import Record, WalkedRecords
from celery_plus.stores.admin_base.queue_history import DepthRow

#: A change primitive's answer for one job: (job id, outcome, extra).
Outcome = tuple[str, str, str]

B = TypeVar("B", bound=Backend)


def check_scope(action: str, scope: Scope, all: bool) -> None:
    """A bulk operation's scope: not empty unless ``all``; at most MAX_PER_PAGE ids."""
    if scope.empty and not all:
        raise UnscopedOperation(action)
    if scope.ids is not None:
        check_ids(action, scope.ids)


def bulk_result(action: str, matched: int, result: BulkResult | None) -> BulkResult:
    """The result a bulk operation fills in (the caller's, if it passed one)."""
    if result is None:
        return BulkResult(action, matched=matched)
    result.action, result.matched = action, matched
    return result


def op_result(job_id: str, action: str, outcome: str, extra: str) -> OpResult:
    """Map a store step's reply to an OpResult: ``outcome`` is the new state (``extra`` the
    previous one), ``noop`` / ``skipped`` (``extra`` the current state) or ``missing``
    (JobNotFound)."""
    if outcome == "missing":
        raise JobNotFound(job_id)
    if outcome in ("noop", "skipped"):
        return OpResult(job_id, action, False, extra, extra)
    return OpResult(job_id, action, True, outcome, extra)


class StoreAdmin(ABC, Generic[B]):
    """:class:`~celery_plus.model.admin.AdminStore` on ``backend``'s store: the orchestration
    here, the store's statements in a subclass (closing it closes the backend only if
    ``owns_backend``)."""

    def __init__(self, backend: B, owns_backend: bool = False) -> None:
        self.backend = backend
        self._owns = owns_backend

    def now_ms(self) -> int:
        return self.backend.now_ms()

    def close(self) -> None:
        if self._owns:
            self.backend.close()

    # -- the store's primitives: listings ------------------------------------------------
    @abstractmethod
    def page(self, state: str, query: Query, offset: int, limit: int
             ) -> tuple[list[Record], int]:
        """``limit`` listing rows of ``state`` from ``offset`` in the listing's order (the
        query's task, queue and time filters applied; no text), and how many match. A row's
        long texts may be cut and a large message left out (``message_size``: its size)."""

    @abstractmethod
    def candidates(self, state: str, query: Query) -> Iterable[Record]:
        """Whole records of ``state`` in the query's task, queue and time filters, in the
        listing's order, read a chunk at a time (none past ``query.text_limit`` and one more,
        which tells the search whether the limit cut it short)."""

    # -- the store's primitives: reads ---------------------------------------------------
    @abstractmethod
    def holder(self, lock: str) -> str | None:
        """The task id holding unique ``lock`` now (None when free or lapsed)."""

    # -- the store's primitives: changes -------------------------------------------------
    @abstractmethod
    def select(self, state: str, scope: Scope) -> list[str]:
        """Ids of ``state`` in ``scope``, oldest first: a plain read (each change re-checks)."""

    @abstractmethod
    def retry_batch(self, ids: Sequence[str], scope: Scope) -> list[Outcome]:
        """Retry ``ids`` (those still failed and in ``scope``) in one atomic step."""

    @abstractmethod
    def discard_one(self, job_id: str) -> Outcome:
        """Discard one failed job in one atomic step."""

    @abstractmethod
    def cancel_one(self, job_id: str) -> Outcome:
        """Cancel one waiting job in one atomic step."""

    def discard_batch(self, ids: Sequence[str]) -> list[Outcome]:
        """Discard each of ``ids``, each job atomically; a store that can overrides this
        with one store call for the batch (by default: one step per job)."""
        return [self.discard_one(job_id) for job_id in ids]

    def cancel_batch(self, ids: Sequence[str]) -> list[Outcome]:
        """Cancel each of ``ids``, as :meth:`discard_batch` discards."""
        return [self.cancel_one(job_id) for job_id in ids]

    @abstractmethod
    def purge_batch(self, state: str, ids: Sequence[str], scope: Scope) -> list[str]:
        """Delete the records of ``ids`` still in ``state`` and ``scope`` in one atomic step;
        the ids deleted."""

    # -- the store's primitives: rows for the summaries ----------------------------------
    @abstractmethod
    def count_rows(self) -> Iterable[tuple[str, int]]:
        """(state, jobs) rows."""

    @abstractmethod
    def status_rows(self) -> StatusRows: ...

    @abstractmethod
    def finished_since(self, since_ms: int) -> tuple[int, int]:
        """(completed, failed) records whose finish time is at or after ``since_ms``."""

    @abstractmethod
    def finished_rows(self, since_ms: int, bucket_ms: int, buckets: int
                      ) -> Iterable[tuple[str, int, int]]:
        """(state, bucket number, records) rows of the completed and failed records finished
        in ``buckets`` buckets of ``bucket_ms`` from ``since_ms``."""

    @abstractmethod
    def wait_rows(self, since_ms: int, limit: int) -> Iterable[tuple[int, str, int | None]]:
        """(started ms, queue, ms from ready to started) rows of (at least) the newest
        ``limit`` running, completed or failed jobs started at or after ``since_ms``."""

    @abstractmethod
    def lease_rows(self) -> Iterable[tuple[str, int, int | None, int | None]]:
        """(worker id, running jobs, newest lease deadline, oldest start) rows."""

    def queue_depth_rows(self) -> Iterable[DepthRow]:
        """(queue, enqueued jobs, since when its oldest enqueued job waits) of each queue
        with jobs enqueued (the queue history's sample: admin_base/queue_history.py); from
        the status rows unless the store reads it more cheaply."""
        rows = self.status_rows()
        oldest: dict[str, int] = {}
        for queue, since in rows.oldest:
            oldest[queue] = min(int(since), oldest.get(queue, int(since)))
        depth: dict[str, int] = {}
        for queue, state, n in rows.depth:
            if state == "enqueued":
                depth[queue] = depth.get(queue, 0) + int(n)
        return [(q, n, oldest.get(q)) for q, n in sorted(depth.items()) if n]

    # -- the store's primitives: the queue history (admin_base/queue_history.py) ---------
    #: Whether this store keeps the queue history.
    keeps_history: ClassVar[bool] = False

    def history_rows(self, since_ms: int, until_ms: int) -> list[tuple[int, int, str]]:
        """(bucket ms, sampled at ms, sample JSON) of the samples whose bucket is in
        [since_ms, until_ms], oldest first (none for a store that keeps no history)."""
        return []

    def history_put(self, bucket_ms: int, at_ms: int, sample: str, keep_from_ms: int
                    ) -> bool:
        """Store the sample of ``bucket_ms`` unless the store has one (True: stored) and
        drop the samples of buckets before ``keep_from_ms``, in one atomic step."""
        raise NotImplementedError(f"{type(self).__name__} keeps no queue history")

    def runtime_rows(self, since_ms: int, limit: int) -> Iterable[tuple[int, str, int | None]]:
        """(finished ms, queue, ms from started to finished) rows of (at least) the newest
        ``limit`` jobs completed at or after ``since_ms`` (none for a store without them)."""
        return []

    def runtime_samples(self, since_ms: int, limit: int) -> list[tuple[str, int]]:
        """(queue, ms run) of the newest ``limit`` jobs completed at or after ``since_ms``."""
        return newest_waits(self.runtime_rows(since_ms, limit), limit)

    # -- the operations ----------------------------------------------------------------
    def page_walked(self, state: str, query: Query, offset: int, limit: int
                    ) -> tuple[list[Record], int, Walked | None]:
        """:meth:`page`, and how far a walk its ``query.walk_limit`` cut short went (None for
        a store that does not walk: it has an index for every filter)."""
        rows, total = self.page(state, query, offset, limit)
        return rows, total, None

    def jobs(self, state: str, query: Query, offset: int, limit: int
             ) -> tuple[list[JobSummary], int]:
        check_state(state)
        if query.text:
            return text_page(self.candidates(state, query), query, offset, limit)
        items, total, _ = self.listing(state, query, offset, limit)
        return items, total

    def listing(self, state: str, query: Query, offset: int, limit: int
                ) -> tuple[list[JobSummary], int, Walked | None]:
        check_state(state)
        rows, total, walked = self.page_walked(state, query, offset, limit)
        return [summary_from_record(rec) for rec in rows], total, walked

    def search(self, state: str, query: Query, offset: int, limit: int) -> Found:
        """A text search's page (as :meth:`jobs`), the task names of the candidates it looked
        at (admin/search.py matches them against the text) and whether its limit cut it
        short."""
        names: set[str] = set()

        def noted(records: Iterable[Record]) -> Iterator[Record]:
            for rec in records:
                names.add(rec.name)
                yield rec

        candidates = self.candidates(state, query)
        items, total, cut = text_search(noted(candidates), query, offset, limit)
        walked = candidates.walk.walked() if isinstance(candidates, WalkedRecords) else None
        return Found(items, total, frozenset(names), cut, walked)

    def show(self, job_id: str) -> JobDetail | None:
        rec = self.backend.record(job_id)
        if rec is None:
            return None
        lock = rec.unique_lock
        return detail_from_record(rec, self.holder(lock) if lock else None)

    def retry(self, job_id: str) -> OpResult:
        [(_, outcome, extra)] = self.retry_batch([job_id], Scope())
        if outcome == "conflict":
            rec = self.backend.record(job_id)
            raise RetryConflict(job_id, extra, rec.unique_lock if rec is not None else "")
        return op_result(job_id, "retry", outcome, extra)

    def discard(self, job_id: str) -> OpResult:
        _, outcome, extra = self.discard_one(job_id)
        return op_result(job_id, "discard", outcome, extra)

    def cancel(self, job_id: str) -> OpResult:
        _, outcome, extra = self.cancel_one(job_id)
        return op_result(job_id, "cancel", outcome, extra)

    def discard_many(self, ids: Sequence[str]) -> list[OpResult]:
        """What discarding each of ``ids`` did (jobs not found left out), BATCH a call."""
        return self._found("discard", ids, self.discard_batch)

    def cancel_many(self, ids: Sequence[str]) -> list[OpResult]:
        """What canceling each of ``ids`` did (jobs not found left out), BATCH a call."""
        return self._found("cancel", ids, self.cancel_batch)

    @staticmethod
    def _found(action: str, ids: Sequence[str],
               step: Callable[[Sequence[str]], list[Outcome]]) -> list[OpResult]:
        return [op_result(job_id, action, outcome, extra)
                for chunk in batches(ids) for job_id, outcome, extra in step(chunk)
                if outcome != "missing"]

    def retry_many(self, scope: Scope, all: bool = False,
                   result: BulkResult | None = None) -> BulkResult:
        check_scope("retry", scope, all)
        ids = self.select("failed", scope)
        result = bulk_result("retry", len(ids), result)
        for chunk in batches(ids):
            for job_id, outcome, extra in self.retry_batch(chunk, scope):
                result.note_retry(job_id, outcome, extra)
        return result

    def purge(self, state: str, scope: Scope, all: bool = False,
              result: BulkResult | None = None) -> BulkResult:
        check_state(state, PURGEABLE)
        check_scope("purge", scope, all)
        ids = self.select(state, scope)
        result = bulk_result("purge", len(ids), result)
        for chunk in batches(ids):
            result.changed += self.purge_batch(state, chunk, scope)
        return result

    # -- the summaries -----------------------------------------------------------------
    def counts(self) -> Counts:
        return counts_from_rows(self.count_rows())

    def status(self) -> Status:
        now, counts = self.now_ms(), self.counts()
        return status_from_rows(now, counts, self.status_rows())

    def finished_histogram(self, since_ms: int, bucket_ms: int, buckets: int
                           ) -> list[tuple[int, int]]:
        return histogram(self.finished_rows(since_ms, bucket_ms, buckets), buckets)

    def wait_samples(self, since_ms: int, limit: int) -> list[tuple[str, int]]:
        return newest_waits(self.wait_rows(since_ms, limit), limit)

    def worker_leases(self) -> list[WorkerLeases]:
        return leases_from_rows(self.lease_rows())

