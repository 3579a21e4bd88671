"""How the admin names a job's state: a running job its worker has not started yet is
**reserved** (claimed, prefetched: waiting in the worker), apart from **running**.

The store learns it from the worker's start marks, carried by its lease heartbeats and its
settles (no store call of their own; ``JobStore.heartbeat``): a job claimed less than one
heartbeat ago shows as running since its claim until the next heartbeat says otherwise, and
one that started less than one heartbeat ago may still show reserved (docs/admin.md).
"""

from __future__ import annotations

from celery_plus.admin.markup import e
from celery_plus.model.admin import JobDetail, JobSummary

#: The state a reserved job is shown as.
RESERVED = "reserved"


def shown_state(job: JobDetail | JobSummary) -> str:
    """``reserved`` for a running job not started yet, else the store's state."""
    summary = job.summary if isinstance(job, JobDetail) else job
    return RESERVED if summary.state == "running" and summary.reserved else summary.state


def reserved_mark(row: JobSummary) -> str:
    """HTML after a listing row's time: a ``reserved`` badge for a job not started yet."""
    if shown_state(row) != RESERVED:
        return ""
    return (f' <span class="reserved" title="claimed by a worker, not started yet">'
            f"{e(RESERVED)}</span>")
