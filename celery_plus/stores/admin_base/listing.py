"""A listing's filters and order applied in Python, for the stores that read records to list
them (the in-process store; Redis for the states it has no time-ordered index of)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from celery_plus.model.admin import Query, Walked, time_of
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


class Walk:
    """The tally of one walk of a store's indexes bounded by ``Query.walk_limit``: how many
    index members it examined of how many, and whether the bound stopped it before the end
    (``building``: the walk stands in for an index still being built, ``Walked.building``)."""

    def __init__(self, of: int, limit: int | None, building: bool = False) -> None:
        self.of, self.limit, self.building = of, limit, building
        self.examined = 0
        self.cut = False

    def allowance(self, want: int) -> int:
        """How many of the next ``want`` members the walk may examine (0: the bound is
        reached, and the walk is cut if members are left)."""
        left = want if self.limit is None else min(want, self.limit - self.examined)
        if left <= 0 and self.examined < self.of:
            self.cut = True
        return max(left, 0)

    def walked(self) -> Walked | None:
        """What a listing says of the walk: None unless the bound cut it short."""
        return Walked(self.examined, self.of, self.building) if self.cut else None


class WalkedRecords(Iterable[Record]):
    """Search candidates found by a bounded walk; ``walk`` tells how far it went once they
    have been read."""

    def __init__(self, records: Iterable[Record], walk: Walk) -> None:
        self._records, self.walk = records, walk

    def __iter__(self) -> Iterator[Record]:
        return iter(self._records)
