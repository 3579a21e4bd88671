"""The admin on the in-process store: each change one step under the store's lock.

The changes follow the rules ``admin retry``, ``admin cancel`` and ``admin discard`` of
:mod:`celery_plus.model.rules`; the orchestration is
:class:`~celery_plus.stores.admin_base.orchestration.StoreAdmin`'s, the listings filter and
order the records with :func:`~celery_plus.stores.admin_base.listing.listed`. The registry
(``stores/registry.py``) serves it for :class:`MemoryBackend`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence

from celery_plus.model import rules
from celery_plus.model.admin import WAITING, Query, Scope
from celery_plus.model.rules import RULES, Hold
from celery_plus.stores.admin_base.aggregates import StatusRows
from celery_plus.stores.admin_base.error_groups import RecordErrorGroups
from celery_plus.stores.admin_base.listing import Record, listed
from celery_plus.stores.admin_base.orchestration import Outcome, StoreAdmin
from celery_plus.stores.admin_base.queue_history import DepthRow
from celery_plus.stores.memory.backend import MemoryBackend
from celery_plus.stores.memory.state import Job
from celery_plus.stores.memory.step import Step

#: A change to one job inside a step: (outcome, extra).
Change = Callable[[Step, Job], tuple[str, str]]


def _reserved(job: Job) -> bool:
    """Claimed by a worker that has not started it (its start mark is -token)."""
    return job.state == "running" and bool(job.token) and job.start_mark == -(job.token or 0)


class MemoryAdmin(RecordErrorGroups, StoreAdmin[MemoryBackend]):
    """:class:`~celery_plus.model.admin.AdminStore` on a :class:`MemoryBackend`'s store."""

    def _jobs(self) -> list[Job]:
        with self.backend.store.lock:
            return list(self.backend.store.jobs.values())

    # -- listings -----------------------------------------------------------------------
    def _listed(self, state: str, query: Query) -> list[Record]:
        return listed((job.record() for job in self._jobs() if job.state == state),
                      state, query)

    def page(self, state: str, query: Query, offset: int, limit: int
             ) -> tuple[list[Record], int]:
        rows = self._listed(state, query)
        return rows[offset:offset + limit], len(rows)

    def candidates(self, state: str, query: Query) -> Iterator[Record]:
        return iter(self._listed(state, query))

    def holder(self, lock: str) -> str | None:
        with self.backend.store.lock:
            hold = self.backend.store.live_hold(lock, self.now_ms())
            return None if hold is None else hold.holder

    def select(self, state: str, scope: Scope) -> list[str]:
        now = self.now_ms()
        found = sorted((job.finished_ms or 0, job.id) for job in self._jobs()
                       if job.state == state and (scope.ids is None or job.id in scope.ids)
                       and scope.matches(now, job.name, job.queue, job.finished_ms))
        return [job_id for _, job_id in found]

    # -- changes (one step each) --------------------------------------------------------
    def _each(self, ids: Sequence[str], change: Change) -> list[Outcome]:
        """``change`` on each of ``ids`` in one step (a missing job: ``missing``)."""

        def run(step: Step) -> list[Outcome]:
            out: list[Outcome] = []
            for job_id in ids:
                job = step.state.jobs.get(job_id)
                out.append((job_id, *change(step, job)) if job is not None
                           else (job_id, "missing", ""))
            return out

        return self.backend._step(run)

    @staticmethod
    def _entry(step: Step, job: Job, outcome: str) -> None:
        step.admin_entry(job, {"delivery": job.deliveries, "worker": "",
                               "started_ms": step.now, "finished_ms": step.now,
                               "outcome": outcome})

    def retry_batch(self, ids: Sequence[str], scope: Scope) -> list[Outcome]:
        def retry(step: Step, job: Job) -> tuple[str, str]:
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
            job.score = (job.score // rules.PRIORITY_FACTOR * rules.PRIORITY_FACTOR
                         + step.state.seq)
            job.deliveries, job.enqueued_ms, job.finished_ms = 0, step.now, None
            step.enqueue(job)
            return "enqueued", "failed"

        return self._each(ids, retry)

    def discard_one(self, job_id: str) -> Outcome:
        def discard(step: Step, job: Job) -> tuple[str, str]:
            if job.state not in RULES["admin discard"].sources:
                return "noop", job.state
            self._entry(step, job, "admin discard")
            job.state, job.finished_ms = "discarded", step.now
            return "discarded", "failed"

        [outcome] = self._each([job_id], discard)
        return outcome

    def cancel_one(self, job_id: str) -> Outcome:
        def cancel(step: Step, job: Job) -> tuple[str, str]:
            previous = job.state
            if previous not in RULES["admin cancel"].sources:
                return "noop", previous
            step.apply_hold(job, RULES["admin cancel"].hold.get(job.window, Hold.KEEP))
            self._entry(step, job, "admin cancel")
            job.state, job.finished_ms = "canceled", step.now
            return "canceled", previous

        [outcome] = self._each([job_id], cancel)
        return outcome

    def purge_batch(self, state: str, ids: Sequence[str], scope: Scope) -> list[str]:
        def delete(step: Step, job: Job) -> tuple[str, str]:
            if job.state != state or not scope.matches(step.now, job.name, job.queue,
                                                       job.finished_ms):
                return "noop", job.state
            del step.state.jobs[job.id]
            return "deleted", state

        return [job_id for job_id, outcome, _ in self._each(ids, delete) if outcome == "deleted"]

    # -- rows for the summaries --------------------------------------------------------
    def count_rows(self) -> Iterable[tuple[str, int]]:
        jobs = self._jobs()
        return ([(job.state, 1) for job in jobs]
                + [("reserved", 1) for job in jobs if _reserved(job)])

    def status_rows(self) -> StatusRows:
        jobs = self._jobs()
        return StatusRows(
            depth=[(j.queue, j.state, 1) for j in jobs
                   if j.state in (*WAITING, "running", "failed")]
            + [(j.queue, "reserved", 1) for j in jobs if _reserved(j)],
            oldest=[(j.queue, max(j.enqueued_ms, j.due_ms)) for j in jobs
                    if j.state in ("enqueued", "blocked")],
            blocked=[(j.group, 1, j.limit) for j in jobs if j.state == "blocked" and j.group],
            running=[(j.group, 1, j.limit) for j in jobs if j.state == "running" and j.group])

    def queue_depth_rows(self) -> list[DepthRow]:
        per: dict[str, list[int]] = {}
        for j in self._jobs():
            if j.state == "enqueued":
                entry = per.setdefault(j.queue, [0, max(j.enqueued_ms, j.due_ms)])
                entry[0] += 1
                entry[1] = min(entry[1], max(j.enqueued_ms, j.due_ms))
        return [(q, n, at) for q, (n, at) in sorted(per.items())]

    keeps_history = True

    def history_rows(self, since_ms: int, until_ms: int) -> list[tuple[int, int, str]]:
        with self.backend.store.lock:
            return sorted((b, at, s) for b, (at, s) in self.backend.store.history.items()
                          if since_ms <= b <= until_ms)

    def history_put(self, bucket_ms: int, at_ms: int, sample: str, keep_from_ms: int
                    ) -> bool:
        with self.backend.store.lock:
            history = self.backend.store.history
            for old in [b for b in history if b < keep_from_ms]:
                del history[old]
            if bucket_ms in history:
                return False
            history[bucket_ms] = (at_ms, sample)
            return True

    def finished_since(self, since_ms: int) -> tuple[int, int]:
        finished = [j.state for j in self._jobs() if (j.finished_ms or 0) >= since_ms]
        return finished.count("completed"), finished.count("failed")

    def finished_rows(self, since_ms: int, bucket_ms: int, buckets: int
                      ) -> Iterable[tuple[str, int, int]]:
        return [(j.state, ((j.finished_ms or 0) - since_ms) // bucket_ms, 1)
                for j in self._jobs() if j.state in ("completed", "failed")
                and (j.finished_ms or 0) >= since_ms]

    def wait_rows(self, since_ms: int, limit: int) -> Iterable[tuple[int, str, int | None]]:
        return [(j.started_ms, j.queue, j.started_ms - max(j.enqueued_ms, j.due_ms))
                for j in self._jobs() if j.state in ("running", "completed", "failed")
                and j.started_ms is not None and j.started_ms >= since_ms
                and not _reserved(j)]

    def runtime_rows(self, since_ms: int, limit: int) -> Iterable[tuple[int, str, int | None]]:
        return [(j.finished_ms, j.queue, j.finished_ms - j.started_ms) for j in self._jobs()
                if j.state == "completed" and j.finished_ms is not None
                and j.started_ms is not None and j.finished_ms >= since_ms]

    def lease_rows(self) -> Iterable[tuple[str, int, int | None, int | None]]:
        return [(job.worker, 1, job.lease_ms, job.started_ms)
                for job in self._jobs() if job.state == "running" and job.worker]


