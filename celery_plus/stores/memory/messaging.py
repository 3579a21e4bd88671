"""Transient queues, bindings, transient marks, role leases and schedule entries of the
in-process store (the parts of ``Backend`` with no job rules), as a mixin of
:class:`~celery_plus.stores.memory.backend.MemoryBackend`."""

from __future__ import annotations

import dataclasses

from celery_plus.model.store import (
    WORKER_RECORD_KEEP_MS,
    NewJob,
    RateUsage,
    ScheduleRecord,
    WorkerBeat,
    rate_usage_of,
)
from celery_plus.stores.memory.state import Hold, MemoryState

#: A transient queue's messages expire this long after its last push (ms).
TRANSIENT_TTL_MS = 300_000


class Messaging:
    store: MemoryState

    def _now(self) -> int:
        return self.store.clock()

    def _publish_locked(self, job: NewJob, now: int) -> str:
        raise NotImplementedError

    # -- transient queues -----------------------------------------------------------------
    def _live(self, queue: str, now: int) -> list[bytes]:
        if self.store.transient_until.get(queue, now) < now:
            self.store.transient.pop(queue, None)
            self.store.transient_until.pop(queue, None)
        return self.store.transient.get(queue, [])

    def push_transient(self, queue: str, message: bytes | str) -> None:
        with self.store.lock:
            now = self._now()
            self._live(queue, now)
            body = message.encode() if isinstance(message, str) else bytes(message)
            self.store.transient.setdefault(queue, []).append(body)
            self.store.transient_until[queue] = now + TRANSIENT_TTL_MS
            self.store.changed.notify_all()

    def pop_transient(self, queue: str) -> bytes | None:
        with self.store.lock:
            messages = self._live(queue, self._now())
            return messages.pop(0) if messages else None

    def transient_size(self, queue: str) -> int:
        with self.store.lock:
            return len(self._live(queue, self._now()))

    def purge_transient(self, queue: str) -> int:
        with self.store.lock:
            count = len(self._live(queue, self._now()))
            self.store.transient.pop(queue, None)
            self.store.transient_until.pop(queue, None)
            return count

    def transient_deadline(self, queue: str) -> int | None:
        with self.store.lock:
            return (self.store.transient_until.get(queue)
                    if self._live(queue, self._now()) else None)

    # -- bindings and marks -----------------------------------------------------------------
    def bind(self, exchange: str, binding: str, ttl_ms: int = 0) -> None:
        with self.store.lock:
            now = self._now()
            table = self.store.bindings.setdefault(exchange, {})
            for name in [n for n, until in table.items() if until is not None and until < now]:
                del table[name]
            table[binding] = now + ttl_ms if ttl_ms > 0 else None

    def unbind(self, exchange: str, binding: str) -> None:
        with self.store.lock:
            self.store.bindings.get(exchange, {}).pop(binding, None)

    def bindings(self, exchange: str) -> list[str]:
        with self.store.lock:
            now = self._now()
            return [name for name, until in self.store.bindings.get(exchange, {}).items()
                    if until is None or until >= now]

    def mark_transient(self, queue: str, ttl_ms: int) -> None:
        with self.store.lock:
            self.store.marks[queue] = self._now() + max(int(ttl_ms), 1)

    def is_marked_transient(self, queue: str) -> bool:
        with self.store.lock:
            return self.store.marks.get(queue, -1) >= self._now()

    # -- role leases and schedule entries ------------------------------------------------------
    def lead(self, role: str, holder: str, ttl_ms: int) -> bool:
        with self.store.lock:
            now = self._now()
            current = self.store.leases.get(role)
            if current is not None and current.holder != holder and current.deadline >= now:
                return False
            self.store.leases[role] = Hold(holder, now + max(int(ttl_ms), 1))
            return True

    def resign(self, role: str, holder: str) -> None:
        with self.store.lock:
            current = self.store.leases.get(role)
            if current is not None and current.holder == holder:
                del self.store.leases[role]

    def role_holder(self, role: str) -> tuple[str, int] | None:
        with self.store.lock:
            current = self.store.leases.get(role)
            if current is None or current.deadline < self._now():
                return None
            return current.holder, current.deadline

    def schedule_register(self, name: str, last_due_ms: int, task: str = "",
                          schedule: str = "") -> ScheduleRecord:
        with self.store.lock:
            entry = self.store.schedules.get(name) or ScheduleRecord(name, int(last_due_ms))
            entry = dataclasses.replace(entry, task=task, schedule=schedule)
            self.store.schedules[name] = entry
            return entry

    def schedule_fire(self, name: str, expected_last_ms: int, due_ms: int, next_ms: int,
                      job: NewJob | None) -> str:
        with self.store.lock:
            entry = self.store.schedules.get(name)
            if entry is None:
                return "missing"
            if entry.last_due_ms != int(expected_last_ms):
                return "stale"
            entry = dataclasses.replace(entry, last_due_ms=int(due_ms), next_due_ms=int(next_ms))
            self.store.schedules[name] = entry
            if entry.paused:
                return "paused"
            if job is None:
                return "skipped"
            self.store.schedules[name] = dataclasses.replace(
                entry, last_job_id=job.id, fired=entry.fired + 1)
            self._publish_locked(job, self._now())
            return "fired"

    def schedules(self) -> list[ScheduleRecord]:
        with self.store.lock:
            return [self.store.schedules[name] for name in sorted(self.store.schedules)]

    def schedule_pause(self, name: str, paused: bool) -> bool:
        with self.store.lock:
            entry = self.store.schedules.get(name)
            if entry is None:
                return False
            self.store.schedules[name] = dataclasses.replace(entry, paused=paused)
            return True

    def schedule_delete(self, name: str) -> bool:
        with self.store.lock:
            return self.store.schedules.pop(name, None) is not None

    # -- paused queues ----------------------------------------------------------------------
    def queue_pause(self, queue: str, paused: bool) -> int:
        with self.store.lock:
            now = self._now()
            if paused:
                self.store.paused.setdefault(queue, now)
            elif self.store.paused.pop(queue, None) is not None:
                self.store.changed.notify_all()
            return now

    def paused_queues(self) -> dict[str, int]:
        with self.store.lock:
            return dict(self.store.paused)

    # -- worker records ---------------------------------------------------------------------
    def worker_beat(self, beat: WorkerBeat) -> None:
        with self.store.lock:
            now = self._now()
            was = self.store.workers.get(beat.node)
            started = was.started_ms if was is not None and was.pid == beat.pid else now
            self.store.workers[beat.node] = dataclasses.replace(beat, started_ms=started,
                                                                at_ms=now)
            for node, rec in list(self.store.workers.items()):
                if rec.at_ms < now - WORKER_RECORD_KEEP_MS:
                    del self.store.workers[node]

    def rate_usage(self) -> list[RateUsage]:
        with self.store.lock:
            now = self._now()
            claims = [(g, True, at) for g, r in self.store.rates.items()
                      for at in r.starts.values()]
            claims += [(g, False, at) for g, r in self.store.rates.items()
                       for at in r.pending.values()]
            limits: dict[str, tuple[int, int]] = {}
            parked: dict[str, int] = {}
            for job in self.store.jobs.values():
                if job.rate is not None:
                    limits.setdefault(job.rate[0], (job.rate[1], job.rate[2]))
                    if job.state == "blocked" and job.rate_parked:
                        parked[job.rate[0]] = parked.get(job.rate[0], 0) + 1
            return rate_usage_of(now, claims, limits, parked)

    def worker_beats(self) -> list[WorkerBeat]:
        with self.store.lock:
            return [self.store.workers[n] for n in sorted(self.store.workers)]
