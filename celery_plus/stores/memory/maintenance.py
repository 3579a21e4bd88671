"""The maintenance pass of the in-process store (``lua/maintain.lua``): promote due jobs,
renew the holds jobs still need, give rate-parked jobs back, drop stale slot entries and
unblock parked jobs, prune finished records — each bounded, as in the other stores."""

from __future__ import annotations

from celery_plus.model import rules
from celery_plus.stores.memory import rates
from celery_plus.stores.memory.step import Step

#: Bounds of one pass.
BATCH = 500
UNBLOCK_GROUPS = 50


def renew_holds(step: Step, limit: int, waiting_too: bool) -> int:
    """Rule ``renew holds``: a hold lapsing within half a backstop whose job still needs it."""
    due = sorted(((lock, h) for lock, h in step.state.holds.items()
                  if rules.renew_due(h.deadline, step.now, step.backstop_ms)),
                 key=lambda item: item[1].deadline)[:limit]
    renewed = 0
    for lock, hold in due:
        job = step.state.jobs.get(hold.holder)
        if job is not None and job.lock == lock and rules.needs_hold(job.state, job.window,
                                                                     waiting_too):
            hold.deadline = step.now + step.backstop_ms
            renewed += 1
    return renewed


def blocked_groups(step: Step) -> list[str]:
    """Up to UNBLOCK_GROUPS groups having blocked jobs, going on after the last pass's."""
    every = sorted({j.group for j in step.state.jobs.values()
                    if j.state == "blocked" and j.group})
    start = step.state.group_cursor
    groups = ([g for g in every if g > start] + [g for g in every if g <= start])[
        :UNBLOCK_GROUPS]
    step.state.group_cursor = groups[-1] if len(groups) >= UNBLOCK_GROUPS else ""
    return groups


def sweep_slots(step: Step) -> int:
    """Slot entries of jobs no longer running go; one parked job per free slot is
    unblocked (rule ``unblock``)."""
    jobs, unblocked = step.state.jobs, 0
    for group in blocked_groups(step):
        holders = step.state.slots.setdefault(group, set())
        holders -= {i for i in holders if i not in jobs or jobs[i].state != "running"}
        parked = [j for j in jobs.values() if j.state == "blocked" and j.group == group]
        free = min(parked, key=lambda j: j.score).limit - len(holders)
        while free > 0 and step.unblock_one(group):
            free -= 1
            unblocked += 1
    return unblocked


def prune(step: Step, state: str, retention_ms: int, max_count: int) -> int:
    """Rule ``prune``: records of ``state`` past their retention, then beyond the count
    bound, oldest first (by finish time, then id)."""
    done = sorted((j for j in step.state.jobs.values() if j.state == state),
                  key=lambda j: (j.finished_ms or 0, j.id))
    old = [j for j in done if rules.prunable(j.finished_ms or 0, step.now, retention_ms)]
    gone = old[:BATCH]
    rest = done[len(gone):]  # ``old`` is a prefix of ``done``
    if len(rest) > max_count:
        gone += rest[:min(len(rest) - max_count, BATCH)]
    for job in gone:
        del step.state.jobs[job.id]
    return len(gone)


def run(step: Step, retention: tuple[int, int, int, int], waiting_holds: bool) -> None:
    """One pass (the caller took the once-per-interval lock)."""
    step.promote_due(BATCH)
    renew_holds(step, BATCH, waiting_holds)
    rates.wake_all(step)
    rates.release(step, BATCH)
    sweep_slots(step)
    completed, completed_max, dead, dead_max = retention
    for state, retention_ms, count in (("completed", completed, completed_max),
                                       ("failed", dead, dead_max),
                                       ("canceled", completed, completed_max),
                                       ("discarded", completed, completed_max)):
        prune(step, state, retention_ms, count)
