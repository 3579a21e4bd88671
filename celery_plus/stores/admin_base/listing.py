"""A listing's filters and order applied in Python, for the stores that read records to list
them (the in-process store; Redis for the states it has no time-ordered index of)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from celery_plus.model.admin import Query, time_field

Record = tuple[str, Mapping[str, Any]]


def listed(records: Iterable[Record], state: str, query: Query) -> list[Record]:
    """The (id, record) pairs still in ``state`` that ``query``'s task, queue and time
    filters keep, in the listing's order: by the state's time then id, newest first
    (``Query.oldest_first``: oldest first). Records use the Redis hash's field names."""
    at = time_field(state)
    kept = []
    for job_id, rec in records:
        moment = int(rec.get(at) or 0)
        if (rec.get("st") == state and query.task in (None, rec.get("name"))
                and query.queue in (None, rec.get("q")) and query.matches_time(moment)):
            kept.append((moment, job_id, rec))
    kept.sort(key=lambda row: (row[0], row[1]), reverse=not query.oldest_first)
    return [(job_id, rec) for _, job_id, rec in kept]
