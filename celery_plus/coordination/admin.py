"""The admin in coordinated mode: the coordination store's admin, with a retry that publishes.

Listing, ``show``, discard, cancel, purge and status are the store's own admin operations
(``celery_plus.admin``): the coordination store holds the same job records as a durable store.
A retry is two steps: the store's retry (failed -> enqueued, same task id, the unique key
re-checked atomically; a conflict changes nothing), then the stored message is published again
to the app's broker, body byte for byte, to the exchange and routing key it was first sent to.
If that publish fails, the job is dead-lettered again (reason ``retry not published``) and the
error is raised, so a retry never leaves a job waiting for a message that does not exist.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Sequence
from typing import Any

from celery_plus.coordination import envelope
from celery_plus.coordination.coordinator import Coordinator, coordinator_for
from celery_plus.model.admin import (
    AdminStore,
    BulkResult,
    Counts,
    Found,
    JobDetail,
    JobSummary,
    OpResult,
    Query,
    Scope,
    Status,
    Walked,
    WorkerLeases,
)
from celery_plus.model.store import Backend, Settle
from celery_plus.stores.registry import admin_for

logger = logging.getLogger("celery_plus.coordination")


def coordinated_admin_store(app: Any) -> AdminStore | None:
    """The admin store of ``app``'s coordination store (None unless in coordinated mode)."""
    coordinator = coordinator_for(app)
    if coordinator is None:
        return None
    backend = coordinator.open_backend()
    try:
        return CoordinatedAdminStore(admin_for(backend, owns_backend=True), backend,
                                     coordinator)
    except BaseException:
        backend.close()
        raise


class CoordinatedAdminStore:
    """An :class:`~celery_plus.model.admin.AdminStore` whose retries reach the broker."""

    def __init__(self, store: AdminStore, backend: Backend, coordinator: Coordinator) -> None:
        self.store = store
        self.backend = backend
        self.coordinator = coordinator

    # -- the store's own operations -----------------------------------------------------
    def now_ms(self) -> int:
        return self.store.now_ms()

    def counts(self) -> Counts:
        return self.store.counts()

    def jobs(self, state: str, query: Query, offset: int, limit: int
             ) -> tuple[list[JobSummary], int]:
        return self.store.jobs(state, query, offset, limit)

    def listing(self, state: str, query: Query, offset: int, limit: int
                ) -> tuple[list[JobSummary], int, Walked | None]:
        return self.store.listing(state, query, offset, limit)

    def search(self, state: str, query: Query, offset: int, limit: int) -> Found:
        return self.store.search(state, query, offset, limit)

    def show(self, job_id: str) -> JobDetail | None:
        return self.store.show(job_id)

    def discard(self, job_id: str) -> OpResult:
        return self.store.discard(job_id)

    def discard_many(self, ids: Sequence[str]) -> list[OpResult]:
        return self.store.discard_many(ids)

    def cancel(self, job_id: str) -> OpResult:
        return self.store.cancel(job_id)

    def cancel_many(self, ids: Sequence[str]) -> list[OpResult]:
        return self.store.cancel_many(ids)

    def purge(self, state: str, scope: Scope, all: bool = False,
              result: BulkResult | None = None) -> BulkResult:
        return self.store.purge(state, scope, all=all, result=result)

    def status(self) -> Status:
        return self.store.status()

    def finished_since(self, since_ms: int) -> tuple[int, int]:
        return self.store.finished_since(since_ms)

    def finished_histogram(self, since_ms: int, bucket_ms: int, buckets: int
                           ) -> list[tuple[int, int]]:
        return self.store.finished_histogram(since_ms, bucket_ms, buckets)

    def wait_samples(self, since_ms: int, limit: int) -> list[tuple[str, int]]:
        return self.store.wait_samples(since_ms, limit)

    def worker_leases(self) -> list[WorkerLeases]:
        return self.store.worker_leases()

    def close(self) -> None:
        self.store.close()

    # -- retries: the store's, then the broker's ----------------------------------------
    def retry(self, job_id: str) -> OpResult:
        result = self.store.retry(job_id)
        if result.changed:
            self._publish(job_id)
        return result

    def retry_many(self, scope: Scope, all: bool = False,
                   result: BulkResult | None = None) -> BulkResult:
        result = self.store.retry_many(scope, all=all, result=result)
        failed: list[tuple[str, BaseException]] = []
        for job_id in list(result.changed):
            try:
                self._publish(job_id)
            except Exception as exc:
                failed.append((job_id, exc))
                result.changed.remove(job_id)
        if failed:
            first_id, first_error = failed[0]
            raise RuntimeError(
                f"{len(failed)} retried job(s) could not be published to the broker and are "
                f"dead letters again (first: {first_id}: {first_error!r}); "
                f"{len(result.changed)} were retried") from first_error
        return result

    def _publish(self, job_id: str) -> None:
        raw = self.backend.raw_message(job_id)
        record = self.backend.record(job_id)
        try:
            if raw is None:
                raise LookupError(f"job {job_id} has no stored message")
            envelope.publish(self.coordinator.app, envelope.parse(raw),
                             record.queue if record is not None else "")
        except Exception as exc:
            self._dead_letter_again(job_id, exc)
            raise

    def _dead_letter_again(self, job_id: str, exc: Exception) -> None:
        got = self.backend.claim_job(job_id, "admin")
        if got.outcome != "claimed":
            logger.error("celery-plus: retried job %s was not published and is %s", job_id,
                         got.state)
            return
        self.backend.settle([Settle(job_id, got.token, "fail", {
            "reason": "retry not published", "exc_type": type(exc).__name__,
            "exc_message": str(exc), "traceback": traceback.format_exc()})])
