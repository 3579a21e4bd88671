"""Act on every job that matches a listing's filters: retry, discard, cancel or purge them, a
bounded batch at a time, and say how many were acted on.

The filters are a listing's (task, queue, a time range, text in the arguments or the error).
What matches is read in the listing's order, oldest first, :data:`BATCH` jobs a step; each step
is the store's own per-job atomic operation on those ids (``retry_many(ids=…)``,
``discard_many``, ``cancel_many``, ``purge(ids=…)``), which re-checks each job's state, so a
job that changed meanwhile is left alone. Only jobs already there when the action started are
taken: the time filter's upper end is the store's clock at the start (a retried dead letter
that dies again, or a job published meanwhile, is not acted on twice or unasked). With a text
filter, the matches are found in one pass over the candidates first (their ids, up to
:data:`COLLECT` a pass), then acted on a batch at a time. The result is filled in step by step
(an interrupted action says what it did).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from celery_plus.admin.params import check_text
from celery_plus.model.admin import (
    BATCH,
    PURGEABLE,
    WAITING,
    BulkResult,
    Query,
    batches,
    check_state,
    text_matches,
)

#: Text matches collected per pass over the candidates (their ids only).
COLLECT = 100_000
#: The states each action takes.
ACTION_STATES: dict[str, tuple[str, ...]] = {
    "retry": ("failed",), "discard": ("failed",), "cancel": tuple(WAITING),
    "purge": tuple(PURGEABLE)}


def _filter_query(admin: Any, task: str | None, queue: str | None, since_ms: int | None,
                  until_ms: int | None, text: str | None) -> Query:
    for name, value in (("task", task), ("queue", queue), ("text", text)):
        check_text(name, value)
    now = admin.store.now_ms()
    until_ms = now if until_ms is None else min(until_ms, now)
    return Query(task=task or None, queue=queue or None, since_ms=since_ms, until_ms=until_ms,
                 text=text or None, oldest_first=True)


def count_matching(admin: Any, state: str, *, task: str | None = None,
                   queue: str | None = None, since_ms: int | None = None,
                   until_ms: int | None = None, text: str | None = None) -> int:
    """How many jobs of ``state`` the filters match now (what a confirmation shows; on the
    SQL stores more than 10,000 is 10,001, as every count)."""
    check_state(state)
    query = _filter_query(admin, task, queue, since_ms, until_ms, text)
    return int(admin.store.jobs(state, query, 0, 1)[1])


def act_on_filter(admin: Any, action: str, state: str, *, task: str | None = None,
                  queue: str | None = None, since_ms: int | None = None,
                  until_ms: int | None = None, text: str | None = None,
                  result: BulkResult | None = None, batch: int = BATCH) -> BulkResult:
    """``action`` on every job of ``state`` the filters match (see the module docstring);
    ``admin`` is an :class:`~celery_plus.admin.api.Admin` (times: ms since the epoch)."""
    if action not in ACTION_STATES:
        raise ValueError(f"action: one of {', '.join(ACTION_STATES)} (got {action!r})")
    check_state(state, ACTION_STATES[action])
    if not 1 <= batch <= 1000:
        raise ValueError(f"batch: 1 to 1000 jobs (got {batch})")
    query = _filter_query(admin, task, queue, since_ms, until_ms, text)
    operation: Callable[[Sequence[str]], BulkResult] = {
        "retry": lambda ids: admin.retry_many(ids=ids),
        "discard": admin.discard_many, "cancel": admin.cancel_many,
        "purge": lambda ids: admin.purge(state, ids=ids)}[action]
    result = result if result is not None else BulkResult(action)
    result.action = action
    if query.text is not None and hasattr(admin.store, "candidates"):
        return _act_on_text_matches(admin, state, query, operation, result, batch)
    skip = 0  # matches left in place (a retry conflict, a job that moved on): not asked again
    while True:
        items, _ = admin.store.jobs(state, query, skip, batch)
        if not items:
            return result
        ids = [item.id for item in items]
        done = operation(ids)
        result.matched += len(ids)
        result.changed += done.changed
        result.conflicts += done.conflicts
        skip += len(ids) - len(done.changed)


def _act_on_text_matches(admin: Any, state: str, query: Query,
                         operation: Callable[[Sequence[str]], BulkResult], result: BulkResult,
                         batch: int) -> BulkResult:
    """A text filter: the matches' ids collected in ONE pass over the candidates (a text
    search decodes each record it reads: searching again per batch would read them all once
    per batch), at most :data:`COLLECT` at a time, then acted on ``batch`` at a time."""
    assert query.text is not None
    while True:
        ids: list[str] = []
        for rec in admin.store.candidates(state, query):
            if text_matches(query.text, rec):
                ids.append(rec.id)
                if len(ids) >= COLLECT:
                    break
        before = len(result.changed)
        for chunk in batches(ids, batch):
            done = operation(chunk)
            result.matched += len(chunk)
            result.changed += done.changed
            result.conflicts += done.conflicts
        if len(ids) < COLLECT or len(result.changed) == before:
            return result

