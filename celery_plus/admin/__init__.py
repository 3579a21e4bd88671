"""The celery-plus admin (DESIGN §4): dead letters and jobs, from Python, the CLI and the web.

``from celery_plus import admin; admin.counts(app)`` — see :mod:`celery_plus.admin.api`.
One implementation of :class:`~celery_plus.admin.store.AdminStore` per store
(``redis_admin``, ``sqlite_admin``, ``postgres_admin``); the CLI (``admin/cli.py``) uses this
API only.
"""

from __future__ import annotations

from . import postgres_admin  # noqa: F401  (registers the PostgreSQL admin)
from .api import (
    Admin,
    admin_store_for,
    cancel,
    connect,
    counts,
    discard,
    jobs,
    purge,
    register_admin,
    retry,
    retry_many,
    show,
    status,
    throughput,
)
from .store import (
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
    "JobDetail", "JobNotFound", "JobSummary", "OpResult", "Page", "QueueStatus",
    "RetryConflict", "Status", "Throughput", "UnscopedOperation", "UnsupportedStore",
    "admin_store_for", "cancel", "connect", "counts", "discard", "jobs", "purge",
    "register_admin", "retry", "retry_many", "show", "status", "throughput",
]
