"""The in-process store behind the ``Backend`` interface: the reference model.

Built from :mod:`celery_plus.model.rules` alone (:mod:`.step` carries the rules out), with an
injectable clock, it is the fifth backend of the conformance suite and the oracle of the
model-based tests (``tests/fast/model``). It lives in one process: several ``MemoryBackend``
objects on one :class:`MemoryState` are several workers of one store.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from celery_plus.model.options import DEFAULT_OPTIONS, OptionsView, StoreOptions
from celery_plus.model.store import (
    Backend,
    ClaimResult,
    JobClaim,
    JobRecord,
    NewJob,
    PublishOutcome,
    Recovered,
    ScheduledJob,
    Settle,
    Verdict,
)
from celery_plus.settings import PlusConfig
from celery_plus.stores.memory import maintenance, rates
from celery_plus.stores.memory.messaging import Messaging
from celery_plus.stores.memory.state import Clock, MemoryState, named_state
from celery_plus.stores.memory.step import Step

T = TypeVar("T")

class MemoryBackend(Messaging, OptionsView, Backend):
    """Store operations on one :class:`MemoryState` (a new one unless ``store`` is given).

    ``options`` as every backend takes them; ``clock`` (ms) replaces the wall clock of a new
    store.
    """

    @classmethod
    def from_url(cls, url: str, config: PlusConfig, connection: Any = None) -> MemoryBackend:
        """A backend on the in-process store named by ``url`` (``memory://`` or
        ``memory://name``): every backend of one name in this process shares one store."""
        return cls(named_state(url.partition("://")[2].strip("/")), StoreOptions.of(config))


    def __init__(
        self,
        store: MemoryState | None = None,
        options: StoreOptions = DEFAULT_OPTIONS,
        *,
        clock: Clock | None = None,
    ) -> None:
        self.store = store if store is not None else (
            MemoryState(clock) if clock is not None else MemoryState())
        self.options = options

    def connect(self) -> None:
        """Nothing to reach."""

    def close(self) -> None:
        """Nothing to close."""

    def _step(self, body: Callable[[Step], T]) -> T:
        """Run ``body`` as one atomic step; wake waiters afterwards."""
        with self.store.lock:
            result = body(Step(self.store, self._now(), self.lease_ms, self.backstop_ms))
            self.store.changed.notify_all()
            return result

    # -- publishing and claiming ------------------------------------------------------------
    def _publish_locked(self, job: NewJob, now: int) -> str:
        return Step(self.store, now, self.lease_ms, self.backstop_ms).publish(job).state

    def publish(self, job: NewJob) -> PublishOutcome:
        return self._step(lambda step: step.publish(job))

    def publish_many(self, jobs: Sequence[NewJob]) -> list[PublishOutcome]:
        return self._step(lambda step: [step.publish(job) for job in jobs])

    def claim(self, queues: Sequence[str], worker_id: str, max_jobs: int,
              settles: Sequence[Settle] = ()) -> ClaimResult:
        def body(step: Step) -> ClaimResult:
            result = ClaimResult()
            if settles:
                result.dead_lettered = step.settle(settles)
            step.claim(queues, worker_id, max_jobs, max(self.scan_limit, 4 * max_jobs),
                       result)
            return result

        return self._step(body)

    def claim_job(self, job_id: str, worker_id: str) -> JobClaim:
        return self._step(lambda step: step.claim_job(job_id, worker_id))

    def settle(self, settles: Sequence[Settle]) -> list[tuple[str, str]]:
        return self._step(lambda step: step.settle(settles))

    def rate_started(self, job_id: str, token: int) -> None:
        self._step(lambda step: rates.started(step, job_id, int(token)))

    def heartbeat(self, held: Sequence[tuple[str, int]],
                  starts: Sequence[int | None] | None = None) -> list[Verdict]:
        return self._step(lambda step: step.heartbeat(held, starts))

    def recover(self, limit: int = 100, *, order: Sequence[str] | None = None
                ) -> list[Recovered]:
        """Recover expired claims; ``order`` breaks ties of equal deadlines (a model
        following a store that breaks them its own way)."""
        return self._step(lambda step: step.recover(limit, order))

    def maintain(self, worker_id: str) -> bool:
        """Run housekeeping unless it ran less than an interval ago. True if it ran."""

        def body(step: Step) -> bool:
            if self.store.maintenance_until >= step.now:
                return False
            self.store.maintenance_until = step.now + self.maintenance_interval_ms
            maintenance.run(step, self.retention, self.renews_waiting_holds)
            return True

        return self._step(body)

    def purge(self, queue: str) -> int:
        return self._step(lambda step: step.purge(queue))

    def wait(self, queues: Sequence[str], transient: Sequence[str], timeout: float
             ) -> tuple[str, str, bytes | None] | None:
        """Block until a job of ``queues`` is ready (or a scheduled one due), or a transient
        message arrives; None after ``timeout`` seconds."""
        if not queues and not transient:
            return None
        deadline = time.monotonic() + max(timeout, 0.0)
        with self.store.lock:
            while True:
                now = self._now()
                live = [q for q in queues if q not in self.store.paused]
                ready = sorted(j.queue for j in self.store.jobs.values() if j.queue in live
                               and (j.state == "enqueued" or (j.state == "scheduled"
                                                              and j.due_ms <= now)))
                if ready:
                    return ("wake", ready[0], None)
                for queue in transient:
                    body = self.pop_transient(queue)
                    if body is not None:
                        return ("transient", queue, body)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                due = [j.due_ms for j in self.store.jobs.values()
                       if j.state == "scheduled" and j.queue in live]
                pause = remaining if not due else min(remaining, (min(due) - now) / 1000)
                self.store.changed.wait(max(pause, 0.001))

    # -- inspection ------------------------------------------------------------------------
    def size(self, queue: str) -> int:
        with self.store.lock:
            return sum(1 for j in self.store.jobs.values()
                       if j.state == "enqueued" and j.queue == queue)

    def scheduled_jobs(self, queues: Sequence[str], limit: int = 1000) -> list[ScheduledJob]:
        with self.store.lock:
            found = sorted((j for j in self.store.jobs.values()
                            if j.state == "scheduled" and j.queue in queues),
                           key=lambda j: (j.due_ms, j.id))[:limit]
            return [ScheduledJob(j.id, j.queue, j.due_ms, j.msg) for j in found]

    def record(self, job_id: str) -> JobRecord | None:
        with self.store.lock:
            job = self.store.jobs.get(job_id)
            return None if job is None else job.record()

    def raw_message(self, job_id: str) -> bytes | None:
        with self.store.lock:
            job = self.store.jobs.get(job_id)
            return None if job is None else job.msg

    def stats(self) -> dict[str, int]:
        with self.store.lock:
            return dict(self.store.stats)

    def now_ms(self) -> int:
        return self._now()
