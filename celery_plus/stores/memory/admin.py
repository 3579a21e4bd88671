"""The admin on the in-process store: each change one step under the store's lock.

The changes follow the rules ``admin retry``, ``admin cancel`` and ``admin discard`` of
:mod:`celery_plus.rules`; the listings and the status are read from the records with the
admin's shared helpers. Registered for :class:`MemoryBackend` with
:func:`~celery_plus.admin.api.register_admin` when this package is imported.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ...admin.api import register_admin
from ...admin.store import (
    PURGEABLE,
    WAITING,
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
    bulk_result,
    check_scope,
    check_state,
    detail_from_record,
    histogram,
    op_result,
    status_from_rows,
    summary_from_record,
    text_page,
    time_field,
)
from ...rules import RULES, Hold
from .backend import MemoryBackend
from .state import Job
from .step import Step

Outcome = tuple[str, str]


class MemoryAdmin:
    """:class:`~celery_plus.admin.store.AdminStore` on a :class:`MemoryBackend`'s store."""

    def __init__(self, backend: MemoryBackend, *, owns_backend: bool = False) -> None:
        self.backend = backend

    def now_ms(self) -> int:
        return self.backend.now_ms()

    def close(self) -> None:
        """Nothing to close."""

    def _jobs(self) -> list[Job]:
        with self.backend.store.lock:
            return list(self.backend.store.jobs.values())

    # -- reads --------------------------------------------------------------------------
    def counts(self) -> Counts:
        known = set(Counts.__dataclass_fields__)
        found: dict[str, int] = {}
        for job in self._jobs():
            if job.state in known:
                found[job.state] = found.get(job.state, 0) + 1
        return Counts(**found)

    def jobs(self, state: str, query: Query, offset: int, limit: int
             ) -> tuple[list[JobSummary], int]:
        check_state(state)
        at = time_field(state)
        rows = []
        for job in self._jobs():
            rec = job.record()
            if (job.state == state and query.task in (None, job.name)
                    and query.queue in (None, job.queue)
                    and query.matches_time(int(rec.get(at) or 0))):
                rows.append((int(rec.get(at) or 0), job.id, rec))
        rows.sort(reverse=not query.oldest_first)
        if query.text:
            return text_page(((job_id, rec) for _, job_id, rec in rows), query, offset, limit)
        return ([summary_from_record(job_id, rec) for _, job_id, rec in
                 rows[offset:offset + limit]], len(rows))

    def show(self, job_id: str) -> JobDetail | None:
        rec = self.backend.job(job_id)
        if rec is None:
            return None
        lock = rec.get("uk") or ""
        return detail_from_record(job_id, rec, self.backend.holder(lock) if lock else None)

    # -- changes ------------------------------------------------------------------------
    def _entry(self, step: Step, job: Job, outcome: str) -> None:
        step.admin_entry(job, {"delivery": job.deliveries, "worker": "",
                               "started_ms": step.now, "finished_ms": step.now,
                               "outcome": outcome})

    def _retry(self, step: Step, job_id: str, scope: Scope) -> Outcome:
        job = step.state.jobs.get(job_id)
        if job is None:
            return "missing", ""
        if job.state not in RULES["admin retry"].sources:
            return "noop", job.state
        if not scope.matches(step.now, job.name, job.queue, job.finished_ms):
            return "skipped", job.state
        if job.lock:
            other = step.take(job.id, job.lock, job.window, job.ttl_ms,
                              step.now + step.backstop_ms)
            if other is not None:
                return "conflict", other
        self._entry(step, job, "admin retry")
        step.state.seq += 1
        job.score = (job.score >> 40 << 40) + step.state.seq
        job.deliveries, job.enqueued_ms, job.finished_ms = 0, step.now, None
        step.enqueue(job)
        return "enqueued", "failed"

    def _discard(self, step: Step, job_id: str) -> Outcome:
        job = step.state.jobs.get(job_id)
        if job is None:
            return "missing", ""
        if job.state not in RULES["admin discard"].sources:
            return "noop", job.state
        self._entry(step, job, "admin discard")
        job.state, job.finished_ms = "discarded", step.now
        return "discarded", "failed"

    def _cancel(self, step: Step, job_id: str) -> Outcome:
        job = step.state.jobs.get(job_id)
        if job is None:
            return "missing", ""
        previous = job.state
        if previous not in RULES["admin cancel"].sources:
            return "noop", previous
        step.apply_hold(job, RULES["admin cancel"].hold.get(job.window, Hold.KEEP))
        self._entry(step, job, "admin cancel")
        job.state, job.finished_ms = "canceled", step.now
        return "canceled", previous

    def _one(self, change: Callable[[Step, str], Outcome], job_id: str) -> Outcome:
        return self.backend._step(lambda step: change(step, job_id))

    def retry(self, job_id: str) -> OpResult:
        outcome, extra = self._one(lambda step, i: self._retry(step, i, Scope()), job_id)
        if outcome == "conflict":
            raise RetryConflict(job_id, extra, (self.backend.job(job_id) or {}).get("uk", ""))
        return op_result(job_id, "retry", outcome, extra)

    def discard(self, job_id: str) -> OpResult:
        return op_result(job_id, "discard", *self._one(self._discard, job_id))

    def cancel(self, job_id: str) -> OpResult:
        return op_result(job_id, "cancel", *self._one(self._cancel, job_id))

    def _in_scope(self, state: str, scope: Scope) -> list[str]:
        now = self.now_ms()
        found = sorted((job.finished_ms or 0, job.id) for job in self._jobs()
                       if job.state == state and (scope.ids is None or job.id in scope.ids)
                       and scope.matches(now, job.name, job.queue, job.finished_ms))
        return [job_id for _, job_id in found]

    def retry_many(self, scope: Scope, all: bool = False,
                   result: BulkResult | None = None) -> BulkResult:
        check_scope("retry", scope, all)
        ids = self._in_scope("failed", scope)
        result = bulk_result("retry", len(ids), result)
        for job_id in ids:
            outcome, extra = self._one(lambda step, i: self._retry(step, i, scope), job_id)
            result.note_retry(job_id, outcome, extra)
        return result

    def purge(self, state: str, scope: Scope, all: bool = False,
              result: BulkResult | None = None) -> BulkResult:
        check_state(state, PURGEABLE)
        check_scope("purge", scope, all)
        ids = self._in_scope(state, scope)
        result = bulk_result("purge", len(ids), result)

        def delete(step: Step, job_id: str) -> Outcome:
            job = step.state.jobs.get(job_id)
            if job is None or job.state != state or not scope.matches(
                    step.now, job.name, job.queue, job.finished_ms):
                return "noop", ""
            del step.state.jobs[job_id]
            return "deleted", state

        result.changed += [i for i in ids if self._one(delete, i)[0] == "deleted"]
        return result

    # -- activity -----------------------------------------------------------------------
    def finished_since(self, since_ms: int) -> tuple[int, int]:
        jobs = self._jobs()
        return tuple(sum(1 for j in jobs if j.state == state and (j.finished_ms or 0) >= since_ms)
                     for state in ("completed", "failed"))  # type: ignore[return-value]

    def finished_histogram(self, since_ms: int, bucket_ms: int, buckets: int
                           ) -> list[tuple[int, int]]:
        rows = [(j.state, ((j.finished_ms or 0) - since_ms) // bucket_ms, 1)
                for j in self._jobs() if j.state in ("completed", "failed")
                and (j.finished_ms or 0) >= since_ms]
        return histogram(rows, buckets)

    def wait_samples(self, since_ms: int, limit: int) -> list[tuple[str, int]]:
        started = sorted(((j.started_ms, j.queue, j.started_ms - max(j.enqueued_ms, j.due_ms))
                          for j in self._jobs() if j.state in ("running", "completed", "failed")
                          and j.started_ms is not None and j.started_ms >= since_ms),
                         reverse=True)
        return [(queue, max(wait, 0)) for _, queue, wait in started[:limit]]

    def worker_leases(self) -> list[WorkerLeases]:
        held: dict[str, list[int]] = {}
        for job in self._jobs():
            if job.state == "running" and job.worker:
                entry = held.setdefault(job.worker, [0, 0, job.started_ms or 0])
                entry[0] += 1
                entry[1] = max(entry[1], job.lease_ms or 0)
                entry[2] = min(entry[2], job.started_ms or 0)
        return [WorkerLeases(worker, n, deadline, start)
                for worker, (n, deadline, start) in sorted(held.items())]

    def status(self) -> Status:
        jobs = self._jobs()
        depth: dict[tuple[str, str], int] = {}
        oldest: dict[str, int] = {}
        blocked: dict[str, list[int]] = {}
        running: dict[str, list[int]] = {}
        for job in jobs:
            if job.state in (*WAITING, "running", "failed"):
                depth[(job.queue, job.state)] = depth.get((job.queue, job.state), 0) + 1
            if job.state in ("enqueued", "blocked"):
                since = max(job.enqueued_ms, job.due_ms)
                oldest[job.queue] = min(oldest.get(job.queue, since), since)
            table = {"blocked": blocked, "running": running}.get(job.state)
            if table is not None and job.group:
                entry = table.setdefault(job.group, [0, 0])
                entry[0], entry[1] = entry[0] + 1, max(entry[1], job.limit)
        return status_from_rows(
            self.now_ms(), self.counts(),
            [(q, s, n) for (q, s), n in depth.items()], oldest.items(),
            _rows(blocked), _rows(running))


def _rows(groups: dict[str, list[int]]) -> Iterable[tuple[str, int, int | None]]:
    return [(group, n, limit) for group, (n, limit) in groups.items()]


def _factory(backend: Any, owns: bool) -> MemoryAdmin:
    return MemoryAdmin(backend, owns_backend=owns)


register_admin(MemoryBackend, _factory)
