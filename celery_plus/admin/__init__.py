"""The celery-plus admin (DESIGN §4): dead letters, jobs and beat's schedules, from Python, the
CLI and the web.

``from celery_plus import admin; admin.counts(app)`` — see :mod:`celery_plus.admin.api`.
Every store's :class:`~celery_plus.model.admin.AdminStore` is
:class:`~celery_plus.stores.admin_base.orchestration.StoreAdmin` (the operations, written
once) over that
store's statements (``celery_plus.stores.*.admin``); the CLI (``cli/admin.py``) uses this
API only.
"""

from __future__ import annotations

from celery_plus.admin.api import (
    Admin,
    admin_for,
    cancel,
    connect,
    counts,
    discard,
    discard_group,
    error_groups,
    jobs,
    pause_queue,
    pause_schedule,
    paused_queues,
    purge,
    queue_history,
    resume_queue,
    resume_schedule,
    retry,
    retry_group,
    retry_many,
    schedules,
    show,
    status,
    task_breakdown,
    throughput,
)
from celery_plus.admin.limits import KeyUsage, TaskLimits, list_limits
from celery_plus.admin.queue_history import QueueHistory, QueuePoint
from celery_plus.admin.queue_pause import QueuePause
from celery_plus.admin.schedules import Schedule, ScheduleNotFound
from celery_plus.admin.workers import WorkerView, list_workers
from celery_plus.model.admin import (
    STATES,
    AdminError,
    AdminStore,
    BulkResult,
    Counts,
    GroupStatus,
    JobDetail,
    JobNotFound,
    JobSummary,
    OpResult,
    Page,
    QueueStatus,
    RetryConflict,
    Status,
    Throughput,
    UnscopedOperation,
    UnsupportedStore,
)

__all__ = [
    "STATES", "Admin", "AdminError", "AdminStore", "BulkResult", "Counts", "GroupStatus",
    "JobDetail", "JobNotFound", "JobSummary", "KeyUsage", "OpResult", "Page", "QueueHistory",
    "QueuePause", "QueuePoint", "QueueStatus", "RetryConflict", "Schedule", "ScheduleNotFound",
    "Status", "TaskLimits", "Throughput", "UnscopedOperation", "UnsupportedStore", "WorkerView",
    "admin_for", "cancel", "connect", "counts", "discard", "discard_group", "error_groups", "jobs",
    "list_limits", "list_workers", "pause_queue", "pause_schedule", "paused_queues", "purge",
    "queue_history", "resume_queue", "resume_schedule", "retry", "retry_group", "retry_many",
    "schedules", "show", "status", "task_breakdown", "throughput",
]
