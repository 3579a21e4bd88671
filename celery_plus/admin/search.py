"""Search by job id and by part of a task name (issue #28), on every store.

* **By id**: a search text that is a job's id finds that job by one direct lookup of its
  record (``AdminStore.show``: a key or primary-key read, the same cost at a million jobs as
  at ten), if it is in the listed state and the other filters.
* **By part of a task name**: the set of task names is small, so the names are matched first
  — the tasks the admin's app registers, and the names of the jobs of the state's scan
  window (its first :data:`NAME_WINDOW` listing rows, read as a page is: by index) — and each
  matching name is then a ``task`` filter (an exact-name listing). The text search itself
  also matches the task name (``model/admin.py``'s ``text_matches``), in its scan window.
"""

from __future__ import annotations

from typing import Any

from celery_plus.model.admin import AdminStore, JobSummary, Query

#: Candidates a text search looks at unless told otherwise (the dashboard's and the CLI's
#: scan window: the first this many of the listing, newest first).
TEXT_WINDOW = 1000
#: Listing rows whose task names a name search reads (a page of the largest size).
NAME_WINDOW = 1000
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
    return row if query.matches_time(row.at_ms) else None


def registered_names(app: Any) -> set[str]:
    """The task names ``app`` registers (Celery's own ``celery.*`` left out)."""
    tasks = getattr(app, "tasks", None) if app is not None else None
    if tasks is None:
        return set()
    return {str(name) for name in list(tasks.keys()) if not str(name).startswith("celery.")}


def task_names(store: AdminStore, app: Any, state: str, contains: str,
               window: int = NAME_WINDOW) -> list[str]:
    """Task names containing ``contains`` (any case): of the tasks ``app`` registers and of
    the jobs among the first ``window`` rows of ``state``'s listing; sorted, at most
    :data:`MAX_NAMES`."""
    low = contains.lower()
    names = registered_names(app)
    rows, _ = store.jobs(state, Query(), 0, window)
    names.update(row.name for row in rows)
    return sorted(name for name in names if low in name.lower())[:MAX_NAMES]
