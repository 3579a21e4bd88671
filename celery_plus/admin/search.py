"""Search by job id and by part of a task name (issue #28), on every store.

* **By id**: a search text that is a job's id finds that job by one direct lookup of its
  record (``AdminStore.show``: a key or primary-key read, the same cost at a million jobs as
  at ten), if it is in the listed state and the other filters.
* **By part of a task name**: the set of task names is small, so the names are matched first
  — the tasks the admin's app registers, and the names of the candidates the text search
  looked at (no read of its own) — and each matching name is then a ``task`` filter (an
  exact-name listing). The text search itself also matches the task name
  (``model/admin.py``'s ``text_matches``), in its scan window.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from celery_plus.model.admin import LIST_TEXT, AdminStore, JobSummary, Query

#: Candidates a text search looks at unless told otherwise (the dashboard's and the CLI's
#: scan window: the first this many of the listing, newest first).
TEXT_WINDOW = 1000
#: Most task names a name search returns.
MAX_NAMES = 50


def by_id(store: AdminStore, state: str, query: Query) -> JobSummary | None:
    """The job whose id is ``query.text``, if it is in ``state`` and in the query's task,
    queue and time filters (one record read); None otherwise."""
    if not query.text:
        return None
    detail = store.show(query.text)
    if detail is None or detail.state != state:
        return None
    row = detail.summary
    if query.task not in (None, row.name) or query.queue not in (None, row.queue):
        return None
    return listing_row(row) if query.matches_time(row.at_ms) else None


def listing_row(row: JobSummary) -> JobSummary:
    """``row`` (a job's whole summary) with its texts cut as a listing's are (LIST_TEXT)."""

    def cut(text: str) -> str:
        return text if len(text) <= LIST_TEXT else text[:LIST_TEXT] + "..."

    return replace(row, name=cut(row.name), queue=cut(row.queue), reason=cut(row.reason),
                   exc_type=cut(row.exc_type), exc_message=cut(row.exc_message))


def registered_names(app: Any) -> set[str]:
    """The task names ``app`` registers (Celery's own ``celery.*`` left out)."""
    try:
        tasks = getattr(app, "tasks", None) if app is not None else None
    except RuntimeError:  # an app that may not finalize itself (autofinalize=False)
        return set()
    if tasks is None:
        return set()
    return {str(name) for name in list(tasks.keys()) if not str(name).startswith("celery.")}


def task_names(app: Any, seen: Iterable[str], contains: str) -> list[str]:
    """Task names containing ``contains`` (any case): of the tasks ``app`` registers and of
    ``seen`` (the candidates a text search looked at); sorted, at most :data:`MAX_NAMES`."""
    low = contains.lower()
    names = registered_names(app) | set(seen)
    return sorted(name for name in names if name and low in name.lower())[:MAX_NAMES]
