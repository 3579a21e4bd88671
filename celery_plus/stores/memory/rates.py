"""Cluster rate limits of the in-process store (docs/rate-limits.md; ``lua/lib.lua``'s
``rate_*`` helpers): a sliding log of starts per group, plus its claims not started yet.

A claim counts in its group's window from the claim on: as not started yet until its task
starts (:func:`started`) or its first lease deadline passes (renewed by heartbeats), then by
its start time. A job claimed over the limit is parked (``blocked``) and given back, oldest
first, when the window has room.
"""

from __future__ import annotations

from typing import Protocol

from celery_plus.model import rules
from celery_plus.stores.memory.state import Job, MemoryState, RateGroup


class Step(Protocol):
    """What the rate rules read of a store step (``step.py``'s ``Step``)."""

    state: MemoryState
    now: int
    lease_ms: int

    def enqueue(self, job: Job) -> None: ...

#: Seconds-scale retry when a group's window is empty but its jobs were not claimed yet.
LOOK_AGAIN_MS = 1000


def _group(step: Step, name: str) -> RateGroup:
    return step.state.rates.setdefault(name, RateGroup())


def room(step: Step, rate: tuple[str, int, int]) -> int:
    """``limit`` minus the group's starts of the last ``window`` ms and its claims not
    started yet (lapsed entries dropped)."""
    name, limit, window = rate
    group = _group(step, name)
    group.starts = {k: at for k, at in group.starts.items()
                    if rules.rate_start_counts(at, step.now, window)}
    group.pending = {k: at for k, at in group.pending.items()
                     if rules.rate_claim_counts(at, step.now)}
    return limit - len(group.starts) - len(group.pending)


def take(step: Step, name: str, job_id: str, token: int) -> None:
    """The claim counts, as not started yet, until its lease deadline."""
    _group(step, name).pending[(job_id, token)] = step.now + step.lease_ms


def renew(step: Step, job: Job, token: int) -> None:
    """A heartbeat keeps a claim not started yet counting, unless it lapsed already (whether
    or not a look at the window dropped it yet)."""
    if job.rate:
        pending = _group(step, job.rate[0]).pending
        at = pending.get((job.id, token))
        if at is not None and rules.rate_claim_counts(at, step.now):
            pending[(job.id, token)] = step.now + step.lease_ms


def opens(step: Step, name: str, window: int) -> int:
    """When the window next has room: its oldest start leaves it, or its oldest claim not
    started yet lapses (now when it has neither)."""
    group = _group(step, name)
    return rules.rate_opens(list(group.starts.values()), list(group.pending.values()), window,
                            step.now)


def _wake_by(group: RateGroup, at: int) -> None:
    group.wake = at if group.wake is None else min(group.wake, at)


def park(step: Step, job: Job) -> None:
    assert job.rate is not None
    name, _, window = job.rate
    job.state, job.rate_parked = "blocked", True
    step.state.stat("rate_limited")
    _wake_by(_group(step, name), opens(step, name, window))


def started(step: Step, job_id: str, token: int) -> None:
    """The task of claim (job_id, token) starts now: it counts by this start time."""
    job = step.state.jobs.get(job_id)
    if job is None or not job.rate:
        return
    name, _, window = job.rate
    group = _group(step, name)
    group.pending.pop((job_id, token), None)
    group.starts[(job_id, token)] = step.now
    if group.wake is not None:
        _wake_by(group, opens(step, name, window))


def wake_all(step: Step) -> None:
    """Maintenance looks at every group with parked jobs again."""
    for job in step.state.jobs.values():
        if job.rate_parked and job.state == "blocked" and job.rate:
            group = _group(step, job.rate[0])
            if group.wake is None:
                group.wake = step.now


def release(step: Step, max_groups: int) -> int:
    """Groups whose window has room get that many parked jobs back, oldest first."""
    due = sorted((g.wake, name) for name, g in step.state.rates.items()
                 if g.wake is not None and g.wake <= step.now)[:max_groups]
    released = 0
    for _, name in due:
        group = step.state.rates[name]
        parked = sorted((j for j in step.state.jobs.values() if j.state == "blocked"
                         and j.rate_parked and j.rate_group == name), key=lambda j: j.score)
        window = 0
        if parked:
            assert parked[0].rate is not None
            window = parked[0].rate[2]
            free = max(room(step, parked[0].rate), 0)
            for job in parked[:free]:
                step.enqueue(job)
            released += len(parked[:free])
            parked = parked[free:]
        if not parked:
            group.wake = None
        else:
            at = opens(step, name, window)
            group.wake = at if at > step.now else step.now + LOOK_AGAIN_MS
    return released
