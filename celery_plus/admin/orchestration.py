"""The admin operations written once, over a few atomic primitives each store provides.

:class:`StoreAdmin` is every store's :class:`~celery_plus.admin.store.AdminStore`: it checks
states and scopes, picks a bulk operation's candidates and changes them a batch at a time,
turns the store's replies into :class:`OpResult` / :class:`BulkResult` values, raises
:class:`RetryConflict`, and runs a listing (a page, or a text search over the store's
records). A store's admin (``stores/*/admin.py``) supplies only its own statements (Lua
scripts, SQL, steps under the in-process store's lock): the primitives below, and the reads
(counts, status, activity) that are one query or script each.

A change primitive is ONE atomic step in the store that re-checks each job's state (and the
bulk scope) itself and answers per job ``(job id, outcome, extra)``: ``outcome`` is the new
state (``extra`` the previous one), ``noop`` / ``skipped`` (``extra`` the current state),
``missing``, or for a retry ``conflict`` (``extra`` the holder of the unique key); see
:func:`~celery_plus.admin.store.op_result`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Generic, TypeVar

from ..transport.backend import Backend
from .store import (
    PURGEABLE,
    BulkResult,
    Counts,
    JobDetail,
    JobSummary,
    OpResult,
    Query,
    RetryConflict,
    Scope,
    Status,
    WorkerLeases,
    batches,
    bulk_result,
    check_scope,
    check_state,
    detail_from_record,
    op_result,
    text_page,
)

#: A change primitive's answer for one job: (job id, outcome, extra).
Outcome = tuple[str, str, str]
#: A record with the Redis hash's field names, as a text search reads it.
Candidate = tuple[str, Mapping[str, Any]]

B = TypeVar("B", bound=Backend)


class StoreAdmin(ABC, Generic[B]):
    """:class:`~celery_plus.admin.store.AdminStore` on ``backend``'s store: the orchestration
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

    # -- the store's primitives ---------------------------------------------------------
    @abstractmethod
    def page(self, state: str, query: Query, offset: int, limit: int
             ) -> tuple[list[JobSummary], int]:
        """``limit`` listing rows of ``state`` from ``offset`` in the listing's order (the
        query's task, queue and time filters applied; no text), and how many match."""

    @abstractmethod
    def candidates(self, state: str, query: Query) -> Iterable[Candidate]:
        """Whole records of ``state`` in the query's task, queue and time filters, in the
        listing's order, read a chunk at a time (a text search may stop early)."""

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

    @abstractmethod
    def purge_batch(self, state: str, ids: Sequence[str], scope: Scope) -> list[str]:
        """Delete the records of ``ids`` still in ``state`` and ``scope`` in one atomic step;
        the ids deleted."""

    # -- the store's reads (one query or script each) ----------------------------------
    @abstractmethod
    def counts(self) -> Counts: ...

    @abstractmethod
    def status(self) -> Status: ...

    @abstractmethod
    def finished_since(self, since_ms: int) -> tuple[int, int]: ...

    @abstractmethod
    def finished_histogram(self, since_ms: int, bucket_ms: int, buckets: int
                           ) -> list[tuple[int, int]]: ...

    @abstractmethod
    def wait_samples(self, since_ms: int, limit: int) -> list[tuple[str, int]]: ...

    @abstractmethod
    def worker_leases(self) -> list[WorkerLeases]: ...

    # -- the operations ----------------------------------------------------------------
    def jobs(self, state: str, query: Query, offset: int, limit: int
             ) -> tuple[list[JobSummary], int]:
        check_state(state)
        if query.text:
            return text_page(self.candidates(state, query), query, offset, limit)
        return self.page(state, query, offset, limit)

    def show(self, job_id: str) -> JobDetail | None:
        rec = self.backend.job(job_id)
        if rec is None:
            return None
        lock = rec.get("uk") or ""
        return detail_from_record(job_id, rec, self.backend.holder(lock) if lock else None)

    def retry(self, job_id: str) -> OpResult:
        [(_, outcome, extra)] = self.retry_batch([job_id], Scope())
        if outcome == "conflict":
            raise RetryConflict(job_id, extra, (self.backend.job(job_id) or {}).get("uk", ""))
        return op_result(job_id, "retry", outcome, extra)

    def discard(self, job_id: str) -> OpResult:
        _, outcome, extra = self.discard_one(job_id)
        return op_result(job_id, "discard", outcome, extra)

    def cancel(self, job_id: str) -> OpResult:
        _, outcome, extra = self.cancel_one(job_id)
        return op_result(job_id, "cancel", outcome, extra)

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
