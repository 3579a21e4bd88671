"""The job operations of the in-process store, each one atomic step at one instant.

Every decision and effect comes from :mod:`celery_plus.model.rules`: :meth:`Step.apply` carries out
a rule of :data:`~celery_plus.model.rules.RULES` (slot, lease, deliveries, history, hold, state and
counter, in the order the stores apply them), and the operations choose the rule.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from celery_plus.model import rules
from celery_plus.model.details import clean_detail
from celery_plus.model.rules import RULES, WAITING, Count, Hold, Lease, PublishKind, Rule, Slot
from celery_plus.model.store import (
    Claim,
    ClaimResult,
    JobClaim,
    NewJob,
    PublishOutcome,
    Recovered,
    Settle,
    Verdict,
    start_time,
)
from celery_plus.stores.memory import rates
from celery_plus.stores.memory.state import Hold as HoldRecord
from celery_plus.stores.memory.state import Job, MemoryState

#: Jobs a claim promotes / rate groups it gives parked jobs back to, at most.
PROMOTE_BATCH = 100
RATE_RELEASE_GROUPS = 20


def _truthy(value: Any) -> bool:
    return value is not None and value is not False


def _text(value: Any) -> str:
    return "" if not _truthy(value) else value if isinstance(value, str) else str(value)


def _bytes(value: str | bytes) -> bytes:
    return value.encode() if isinstance(value, str) else bytes(value)


class Step:
    """One atomic step of a store at instant ``now`` (the caller holds the store's lock)."""

    def __init__(self, state: MemoryState, now: int, lease_ms: int, backstop_ms: int) -> None:
        self.state = state
        self.now = now
        self.lease_ms = lease_ms
        self.backstop_ms = backstop_ms

    # -- holds -------------------------------------------------------------------------
    def holder(self, lock: str) -> str | None:
        hold = self.state.live_hold(lock, self.now)
        return None if hold is None else hold.holder

    def take(self, job_id: str, lock: str, window: str, ttl_ms: int, deadline: int
             ) -> str | None:
        """Hold.TAKE: the key for ``job_id`` (a ttl hold only when free); returns the other
        job holding it (a duplicate) or None."""
        other = self.holder(lock)
        if other is not None and other != job_id:
            return other
        if window != "ttl":
            self.state.holds[lock] = HoldRecord(job_id, deadline)
        elif other is None and ttl_ms > 0:
            self.state.holds[lock] = HoldRecord(job_id, self.now + ttl_ms)
        return None

    def release(self, lock: str, window: str, job_id: str) -> None:
        """Hold.RELEASE: drop a non-ttl hold, only if ``job_id`` holds it."""
        if lock and window != "ttl" and self.holder(lock) == job_id:
            del self.state.holds[lock]

    def apply_hold(self, job: Job, effect: Hold) -> bool:
        """A rule's effect on the job's own hold; False when a RETAKE found it taken."""
        lock = job.lock
        if not lock or effect is Hold.KEEP:
            return True
        if effect is Hold.RELEASE:
            self.release(lock, job.window, job.id)
            return True
        current = self.holder(lock)
        if effect is Hold.REFRESH:
            if current == job.id:
                self.state.holds[lock].deadline = self.now + self.backstop_ms
            return True
        if effect is Hold.RETAKE:
            if current is not None and current != job.id:
                return False
            self.state.holds[lock] = HoldRecord(job.id, self.now + self.backstop_ms)
            return True
        raise ValueError(f"{effect} is decided by the publish, not by a rule")

    # -- slots and waiting -------------------------------------------------------------
    def enqueue(self, job: Job) -> None:
        job.state, job.rate_parked = "enqueued", False

    def unblock_one(self, group: str) -> bool:
        """The oldest job parked on ``group``'s slots goes back to its queue."""
        parked = [j for j in self.state.jobs.values()
                  if j.state == "blocked" and j.group == group and not j.rate_parked]
        if not parked:
            return False
        self.enqueue(min(parked, key=lambda j: j.score))
        return True

    def free_slot(self, job: Job) -> None:
        holders = self.state.slots.get(job.group)
        if holders is not None and job.id in holders:
            holders.discard(job.id)
            self.unblock_one(job.group)

    def take_slot(self, job: Job) -> bool:
        """Slot.TAKE: False (nothing taken) when the group is full."""
        if not job.group:
            return True
        holders = self.state.slots.setdefault(job.group, set())
        if len(holders) >= job.limit:
            return False
        holders.add(job.id)
        return True

    # -- rules ---------------------------------------------------------------------------
    def entry(self, job: Job, outcome: str, detail: dict[str, Any] | None) -> None:
        """An attempt in the job's history (the newest HISTORY_MAX kept)."""
        item: dict[str, Any] = {
            "delivery": job.deliveries, "worker": job.worker or "",
            "started_ms": job.started_ms or 0, "finished_ms": self.now, "outcome": outcome,
            "token": job.token or 0}
        for key in ("exc_type", "exc_message"):
            if detail and key in detail:
                item[key] = detail[key]
        self.admin_entry(job, item)

    def admin_entry(self, job: Job, item: dict[str, Any]) -> None:
        job.history = [*(job.history or []), item][-rules.HISTORY_MAX:]

    def apply(self, job: Job, rule: Rule, outcome: str = "",
              detail: dict[str, Any] | None = None) -> str:
        """Carry out ``rule`` on ``job``: its slot and lease, deliveries, history entry
        (``outcome``), hold (a RETAKE whose key another job took: the job coalesces), state
        and counter. Returns ``coalesced`` or the rule's target state."""
        if rule.lease is Lease.DROP:
            job.lease_ms = None
        if rule.slot is Slot.FREE:
            self.free_slot(job)
        if rule.deliveries is Count.UNDO:
            job.deliveries = max(job.deliveries - 1, 0)
        if rule.history is not None:
            self.entry(job, outcome or rule.history, detail)
        if rule.stat is not None:
            self.state.stat(rule.stat)
        if not self.apply_hold(job, rule.hold.get(job.window, Hold.KEEP)):
            self.apply(job, RULES["coalesce"])
            return "coalesced"
        if rule.target == "enqueued":
            self.enqueue(job)
        elif rule.target == "scheduled":  # defer: back after a back-off (rules.defer_ms)
            job.state, job.due_ms = "scheduled", self.now + rules.defer_ms(job.deliveries)
        elif rule.target in rules.FINISHED:
            job.state, job.finished_ms = rule.target, self.now
        if rule.target == "failed":
            detail = detail or {}
            job.reason = _text(detail.get("reason")) or "task failed"
            job.exc_type = _text(detail.get("exc_type"))
            job.exc_message = _text(detail.get("exc_message"))
            job.traceback = _text(detail.get("traceback"))
        if rule is RULES["coalesce"]:
            job.reason = "coalesced"
        return rule.target

    def dead_letter(self, job: Job, detail: dict[str, Any]) -> None:
        rule = RULES["delivery limit" if detail.get("reason") == "delivery limit" else "fail"]
        self.apply(job, rule, _text(detail.get("reason")) or "task failed", detail)

    # -- publish -----------------------------------------------------------------------
    def publish(self, new: NewJob) -> PublishOutcome:
        jobs = self.state.jobs
        job = jobs.get(new.id)
        kind = rules.publish_kind(job.state if job else None, job.token if job else None,
                                  int(new.lease_token or 0))
        if kind is PublishKind.FENCED:
            return PublishOutcome(False, new.id, holder_id=new.id,
                                  state=job.state if job else "", fenced=True)
        continued = kind is PublishKind.CONTINUE
        old_lock, old_window = (job.lock, job.window) if job else ("", "")
        if continued:
            assert job is not None
            rule = RULES["continuation"]
            job.lease_ms = None
            self.free_slot(job)
            self.entry(job, rule.history or "", None)
        lock, window = new.unique_lock, new.unique_window
        if lock:
            other = self.take(new.id, lock, window, new.unique_ttl_ms,
                              rules.hold_deadline(new.eta_ms, self.now, self.backstop_ms))
            if other is not None:
                if continued:
                    assert job is not None
                    self.release(old_lock, old_window, new.id)
                    self.apply(job, RULES["coalesce"])
                self.state.stat("deduplicated")
                return PublishOutcome(False, new.id, holder_id=other)
        if old_lock and old_lock != lock:
            self.release(old_lock, old_window, new.id)  # rekey: the old key is free
        self.state.seq += 1
        score = rules.score(new.priority, self.state.seq)
        state = rules.publish_state(new.eta_ms, self.now)
        extension = (lock, window, new.unique_ttl_ms, new.concurrency_group,
                     new.concurrency_limit)
        if job is None:
            job = jobs[new.id] = Job(
                new.id, new.queue, new.name, _bytes(new.message), state, score, self.now,
                new.eta_ms, new.max_deliveries,
                extension=extension if lock or new.concurrency_group else None)
        else:
            if not continued:  # a replacement starts afresh; a continuation keeps its claim's
                job.reason = job.exc_type = job.exc_message = job.traceback = None
                job.started_ms = job.finished_ms = None
                job.worker = None
            job.queue, job.name, job.msg, job.state = new.queue, new.name, \
                _bytes(new.message), state
            job.score, job.deliveries, job.max_deliveries = score, 0, new.max_deliveries
            job.enqueued_ms, job.due_ms, job.lease_ms = self.now, new.eta_ms, None
            job.extension = extension
        job.rate = ((new.rate_group, new.rate_limit, new.rate_window_ms) if new.rate_group
                    else None)
        job.rate_parked = False
        return PublishOutcome(True, new.id, state=state, continued=continued)

    # -- claims --------------------------------------------------------------------------
    def promote_due(self, limit: int) -> int:
        due = sorted((j for j in self.state.jobs.values()
                      if j.state == "scheduled" and rules.is_due(j.due_ms, self.now)),
                     key=lambda j: (j.due_ms, j.id))[:limit]
        for job in due:
            self.enqueue(job)
        return len(due)

    def begin_claim(self, job: Job, worker: str) -> tuple[int, int]:
        """A waiting job whose slot is taken becomes running (rule ``claim``)."""
        rule = RULES["claim"]
        self.apply_hold(job, rule.hold.get(job.window, Hold.KEEP))
        self.state.token = rules.next_token(self.state.token, job.token or 0)
        job.token = self.state.token
        job.deliveries += 1
        job.state, job.worker, job.started_ms = "running", worker, self.now
        job.lease_ms, job.rate_parked = self.now + self.lease_ms, False
        return job.token, job.deliveries

    def claim(self, queues: Sequence[str], worker: str, max_jobs: int, scan_limit: int,
              result: ClaimResult) -> None:
        self.promote_due(PROMOTE_BATCH)
        rates.release(self, RATE_RELEASE_GROUPS)
        taken = scanned = 0
        for queue in queues:
            if queue in self.state.paused:
                continue
            while taken < max_jobs and scanned < scan_limit:
                ready = sorted((j for j in self.state.jobs.values()
                                if j.state == "enqueued" and j.queue == queue),
                               key=lambda j: j.score)[:max_jobs - taken]
                if not ready:
                    break
                for job in ready:
                    scanned += 1
                    if job.rate and rates.room(self, job.rate) <= 0:
                        rates.park(self, job)
                        result.blocked.append(job.id)
                        continue
                    if not self.take_slot(job):
                        job.state, job.rate_parked = "blocked", False
                        self.state.stat("blocked")
                        result.blocked.append(job.id)
                        continue
                    token, deliveries = self.begin_claim(job, worker)
                    if job.rate:
                        rates.take(self, job.rate[0], job.id, token)
                    result.claims.append(Claim(job.id, token, job.msg, deliveries, queue))
                    taken += 1
        due = [j.due_ms for j in self.state.jobs.values() if j.state == "scheduled"]
        due += [r.wake for r in self.state.rates.values() if r.wake is not None]
        result.next_due = max(min(due) - self.now, 0) / 1000.0 if due else None

    def claim_job(self, job_id: str, worker: str) -> JobClaim:
        job = self.state.jobs.get(job_id)
        if job is None:
            return JobClaim("missing")
        if job.state == "running":
            left = max((job.lease_ms if job.lease_ms is not None else self.now) - self.now, 0)
            return JobClaim("held", "running", deliveries=job.deliveries, lease_left_ms=left)
        if job.state not in WAITING:
            return JobClaim("finished", job.state)
        if not self.take_slot(job):
            self.state.stat("blocked")
            return JobClaim("blocked", job.state)
        token, deliveries = self.begin_claim(job, worker)
        return JobClaim("claimed", "running", token, deliveries)

    # -- ends of claims ------------------------------------------------------------------
    def settle(self, settles: Sequence[Settle]) -> list[tuple[str, str]]:
        dead: list[tuple[str, str]] = []
        for s in settles:
            job = self.state.jobs.get(s.job_id)
            if job is None or job.state != "running" or job.token != int(s.token):
                continue  # stale: the claim ended or was taken over
            self.mark_start(job, s.run_ms)
            detail = clean_detail(s.detail)
            if s.action == "ack":
                self.apply(job, RULES["ack"])
            elif s.action == "release":
                self.apply(job, RULES["release"])
            elif s.action in ("requeue", "defer") and rules.at_delivery_limit(
                    job.deliveries, job.max_deliveries):
                detail = dict(detail or {}, reason="delivery limit")
                if not _truthy(detail.get("exc_message")):
                    detail["exc_message"] = rules.delivery_limit_message(job.deliveries,
                                                                         False)
                self.dead_letter(job, detail)
                dead.append((job.id, "delivery limit"))
            elif s.action in ("requeue", "defer"):
                default = "requeued" if s.action == "requeue" else "deferred"
                self.apply(job, RULES[s.action], _text((detail or {}).get("reason")) or default,
                           detail)
            else:  # fail, reject
                detail = dict(detail or {})
                if s.action == "reject" and not _truthy(detail.get("reason")):
                    detail["reason"] = "rejected"
                self.dead_letter(job, detail)
                dead.append((job.id, _text(detail.get("reason")) or "task failed"))
        return dead

    def heartbeat(self, held: Sequence[tuple[str, int]],
                  starts: Sequence[int | None] | None = None) -> list[Verdict]:
        """One verdict per claim (rule ``heartbeat``, :func:`rules.heartbeat_verdict`);
        a renewed one's lease is extended and its start mark applied."""
        verdicts = []
        marks = starts if starts is not None else [None] * len(held)
        for (job_id, token), mark in zip(held, marks, strict=True):
            verdict = Verdict(self.verdict(self.state.jobs.get(job_id), int(token)))
            verdicts.append(verdict)
            if verdict is Verdict.RENEWED:
                job = self.state.jobs[job_id]
                job.lease_ms = self.now + self.lease_ms
                rates.renew(self, job, int(token))
                self.mark_start(job, mark)
        return verdicts

    def mark_start(self, job: Job, mark: int | None) -> None:
        """Apply a worker's start mark to the running claim of ``job`` (lua mark_start)."""
        token = job.token or 0
        if mark is None or job.start_mark == token:
            return
        if mark < 0:
            job.start_mark = -token
            return
        job.started_ms = start_time(job.started_ms or self.now, self.now, mark)
        job.start_mark = token

    @staticmethod
    def verdict(job: Job | None, token: int) -> str:
        if job is None:
            return rules.heartbeat_verdict(token, None, 0, 0, "", ())
        return rules.heartbeat_verdict(
            token, job.state, job.token or 0, job.deliveries, job.reason or "",
            (str(e.get("outcome")) for e in job.history or ()
             if isinstance(e, dict) and e.get("token") == token))

    def recover(self, limit: int, order: Sequence[str] | None = None) -> list[Recovered]:
        """Expired claims by their stored deadline (ties by ``order``, else by id)."""
        rank = {job_id: n for n, job_id in enumerate(order or ())}
        expired = sorted(
            (j for j in self.state.jobs.values() if j.state == "running"
             and j.lease_ms is not None and rules.lease_expired(j.lease_ms, self.now)),
            key=lambda j: (j.lease_ms, rank.get(j.id, len(rank)), j.id))[:limit]
        out = []
        for job in expired:
            if rules.at_delivery_limit(job.deliveries, job.max_deliveries):
                self.state.stat("recovered")
                self.dead_letter(job, {"reason": "delivery limit", "exc_message":
                                       rules.delivery_limit_message(job.deliveries, True)})
                out.append(Recovered(job.id, "dead"))
                continue
            why = {"exc_message": rules.lease_expired_message(job.worker)}
            outcome = self.apply(job, RULES["lease expiry"], detail=why)
            out.append(Recovered(job.id, "coalesced" if outcome == "coalesced" else "requeued"))
        return out

    # -- purge -------------------------------------------------------------------------
    def purge(self, queue: str) -> int:
        waiting = [j for j in self.state.jobs.values()
                   if j.state in WAITING and j.queue == queue]
        for job in waiting:
            self.apply_hold(job, RULES["purge"].hold.get(job.window, Hold.KEEP))
            del self.state.jobs[job.id]
        return len(waiting)
