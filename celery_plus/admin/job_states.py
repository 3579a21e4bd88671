"""How the admin names a job's state: a running job its worker has not started yet is
**reserved** (claimed, prefetched: waiting in the worker), apart from **running**; a blocked
job parked by its cluster rate limit (window full) is **rate-limited**, apart from one blocked
behind a concurrency limit.

The store learns it from the worker's start marks, carried by its lease heartbeats and its
settles (no store call of their own; ``JobStore.heartbeat``): a job claimed less than one
heartbeat ago shows as running since its claim until the next heartbeat says otherwise, and
one that started less than one heartbeat ago may still show reserved (docs/admin.md).
"""

from __future__ import annotations

from celery_plus.admin.markup import e
from celery_plus.model.admin import JobDetail, JobSummary

#: The state a reserved job is shown as, and a rate-parked blocked one.
RESERVED = "reserved"
RATE_LIMITED = "rate-limited"
#: Badges of a listing row: (css class, text, title).
BADGES = {RESERVED: ("reserved", "reserved", "claimed by a worker, not started yet"),
          RATE_LIMITED: ("rate-limited", "rate limit",
                         "parked: its cluster rate limit's window is full"),
          "blocked": ("concurrency", "concurrency", "blocked behind its concurrency limit")}


def shown_state(job: JobDetail | JobSummary) -> str:
    """``reserved`` for a running job not started yet, ``rate-limited`` for a job parked by
    its rate limit, else the store's state."""
    summary = job.summary if isinstance(job, JobDetail) else job
    if summary.state == "running" and summary.reserved:
        return RESERVED
    if summary.state == "blocked" and summary.rate_limited:
        return RATE_LIMITED
    return summary.state


def reserved_mark(row: JobSummary) -> str:
    """HTML after a listing row's time: a badge for a reserved job, and for a blocked one
    what blocks it (its rate limit, or its concurrency limit)."""
    badge = BADGES.get(shown_state(row))
    if badge is None:
        return ""
    css, text, title = badge
    return f' <span class="{css}" title="{e(title)}">{e(text)}</span>'
