"""A listing's filters and order applied in Python, for the stores that read records to list
them (the in-process store; Redis for the states it has no time-ordered index of)."""

from __future__ import annotations

from collections.abc import Iterable

from celery_plus.model.admin import Query, time_of
from celery_plus.model.job_record import JobRecord

#: A listing row or a search candidate: the job's record (a row's may be partial).
Record = JobRecord


def listed(records: Iterable[JobRecord], state: str, query: Query) -> list[JobRecord]:
    """The records still in ``state`` that ``query``'s task, queue and time filters keep, in
    the listing's order: by the state's time then id, newest first (``Query.oldest_first``:
    oldest first)."""
    kept = []
    for rec in records:
        moment = time_of(state, rec)
        if (rec.state == state and query.task in (None, rec.name)
                and query.queue in (None, rec.queue) and query.matches_time(moment)):
            kept.append((moment, rec.id, rec))
    kept.sort(key=lambda row: (row[0], row[1]), reverse=not query.oldest_first)
    return [rec for _, _, rec in kept]
