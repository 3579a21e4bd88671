"""The in-process store's inspector: reads of its ``MemoryState`` under the store's lock."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from celery_plus.stores.memory.state import Job
from tests.inspectors.base import Inspector

#: ``ids_in_state`` orders each state as the other stores' indexes do.
ORDER: dict[str, Callable[[Any], Any]] = {
    "completed": lambda j: j.finished_ms, "failed": lambda j: j.finished_ms,
    "canceled": lambda j: j.finished_ms, "discarded": lambda j: j.finished_ms,
    "running": lambda j: j.lease_ms, "scheduled": lambda j: j.due_ms,
    "enqueued": lambda j: j.score, "blocked": lambda j: j.score,
}


def fields_of(job: Job) -> dict[str, str]:
    """The record as text fields named as in ``lua/lib.lua``."""
    fields: dict[str, Any] = {
        "st": job.state, "q": job.queue, "name": job.name,
        "msg": job.msg.decode(errors="replace"), "score": job.score,
        "dl": job.deliveries, "mdl": job.max_deliveries, "enq": job.enqueued_ms,
        "due": job.due_ms, "tok": job.token, "start": job.started_ms,
        "fin": job.finished_ms, "wk": job.worker, "reason": job.reason,
        "etype": job.exc_type, "emsg": job.exc_message, "tb": job.traceback,
    }
    if job.extension is not None:
        fields.update(zip(("uk", "uw", "ut", "cg", "cl"), job.extension, strict=True))
    if job.rate is not None:
        fields.update(zip(("rg", "rl", "rw"), job.rate, strict=True))
    if job.history is not None:
        fields["hist"] = json.dumps(job.history, separators=(",", ":"))
    return {k: str(v) for k, v in fields.items() if v is not None}


class MemoryInspector(Inspector):
    """Read-outs of one ``MemoryBackend``'s ``MemoryState``."""

    @property
    def state(self) -> Any:
        return self.backend.store

    def _now(self) -> int:
        return self.backend.now_ms()  # type: ignore[no-any-return]

    def job(self, job_id: str) -> dict[str, str] | None:
        with self.state.lock:
            job = self.state.jobs.get(job_id)
            return None if job is None else fields_of(job)

    def holder(self, lock: str) -> str | None:
        with self.state.lock:
            hold = self.state.live_hold(lock, self._now())
            return None if hold is None else str(hold.holder)

    def hold_deadline(self, lock: str) -> int | None:
        with self.state.lock:
            hold = self.state.live_hold(lock, self._now())
            return None if hold is None else int(hold.deadline)

    def holds(self) -> dict[str, str]:
        with self.state.lock:
            now = self._now()
            return {lock: h.holder for lock, h in self.state.holds.items()
                    if self.state.live_hold(lock, now) is not None}

    def slot_holders(self, group: str) -> set[str]:
        with self.state.lock:
            return set(self.state.slots.get(group, ()))

    def ids_in_state(self, state: str, limit: int = 1000) -> list[str]:
        order = ORDER.get(state, lambda j: 0)
        with self.state.lock:
            found = sorted((j for j in self.state.jobs.values() if j.state == state),
                           key=lambda j: (order(j), j.id))
            return [j.id for j in found[:limit]]

    def lease_deadline(self, job_id: str) -> int | None:
        with self.state.lock:
            job = self.state.jobs.get(job_id)
            return job.lease_ms if job is not None and job.state == "running" else None

    def transient_deadline(self, queue: str) -> int | None:
        with self.state.lock:
            until = self.state.transient_until.get(queue)
            live = until is None or until >= self._now()
            return until if live and self.state.transient.get(queue) else None

    def blocked_groups(self) -> set[str]:
        with self.state.lock:
            return {j.group for j in self.state.jobs.values()
                    if j.state == "blocked" and j.group and not j.rate_parked}

    def force_state(self, job_id: str, state: str) -> None:
        with self.state.lock:
            job = self.state.jobs.get(job_id)
            if job is not None:
                job.state = state
