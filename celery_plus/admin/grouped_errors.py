"""Dead letters grouped by error: the groups, a group's jobs, and retry / discard per group.

The store keeps the grouping (``error_groups`` / ``error_group_ids`` of its admin: an index on
the SQL stores, an admin-kept index on Redis; ``model/error_groups.py`` says how a message is
normalized), so a listing of the groups never reads every dead letter's record. A bulk action
on a group works oldest first in batches of :data:`BATCH`, on the dead letters of the group that
died before the action started (a retried job that dies again is not taken a second time), and
fills in a :class:`BulkResult` batch by batch (an interrupted action says what it did).
"""

from __future__ import annotations

from typing import Any

from celery_plus.admin.params import check_page, check_text
from celery_plus.model.admin import (
    MAX_PER_PAGE,
    BulkResult,
    Page,
    UnsupportedStore,
    summary_from_record,
)
from celery_plus.model.error_groups import MAX_GROUPS, MESSAGE_CHARS, ErrorGroups

#: Dead letters acted on per step of a group action.
BATCH = 500


def _store(admin: Any) -> Any:
    store = admin.store
    if not hasattr(store, "error_groups"):
        raise UnsupportedStore("this store's admin does not group dead letters by error")
    return store


def _key(exc_type: str, message: str) -> tuple[str, str]:
    check_text("exc_type", exc_type)
    check_text("message", message, MESSAGE_CHARS)
    return exc_type, message


def groups(admin: Any, limit: int = 100) -> ErrorGroups:
    """The dead letters' groups, the largest first (at most ``limit``)."""
    if not 1 <= limit <= MAX_GROUPS:
        raise ValueError(f"limit must be between 1 and {MAX_GROUPS} (got {limit})")
    result: ErrorGroups = _store(admin).error_groups(limit)
    return result


def group_jobs(admin: Any, exc_type: str, message: str, page: int = 1, per_page: int = 50,
               order: str = "newest") -> Page:
    """One page of the group's dead letters, newest first (``order="oldest"``: oldest)."""
    exc_type, message = _key(exc_type, message)
    check_page(page)
    if not 1 <= per_page <= MAX_PER_PAGE:
        raise ValueError(f"per_page must be between 1 and {MAX_PER_PAGE} (got {per_page})")
    if order not in ("newest", "oldest"):
        raise ValueError(f"order must be newest or oldest (got {order!r})")
    store = _store(admin)
    ids, total = store.error_group_ids(exc_type, message, (page - 1) * per_page, per_page,
                                       order == "oldest")
    records = (store.backend.record(i) for i in ids)
    items = [summary_from_record(rec) for rec in records
             if rec is not None and rec.state == "failed"]
    return Page(items=items, total=int(total), page=page, per_page=per_page, state="failed")


def act_on_group(admin: Any, action: str, exc_type: str, message: str,
                 result: BulkResult | None = None) -> BulkResult:
    """Retry (``action="retry"``) or discard (``"discard"``) every dead letter of the group
    that died before this call, oldest first, :data:`BATCH` at a time."""
    if action not in ("retry", "discard"):
        raise ValueError(f"a group action is retry or discard (got {action!r})")
    exc_type, message = _key(exc_type, message)
    store = _store(admin)
    until = store.now_ms()
    result = result if result is not None else BulkResult(action)
    result.action = action
    skip = 0  # members left in the group (a retry conflict): not asked again
    while True:
        ids, _ = store.error_group_ids(exc_type, message, skip, BATCH, True, until)
        if not ids:
            return result
        done = (admin.retry_many(ids=ids) if action == "retry" else admin.discard_many(ids))
        result.matched += done.matched
        result.changed += done.changed
        result.conflicts += done.conflicts
        skip += len(ids) - len(done.changed)
