"""The admin's summaries assembled from rows, however the store counted them.

A store reads rows (SQL aggregates, or one row per record for the stores that read records)
and these functions turn them into the values the admin returns. Rows of the same key are
added up, so per-record rows (a count of 1) and pre-aggregated rows give the same result.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from celery_plus.model.admin import Counts, GroupStatus, QueueStatus, Status, WorkerLeases
from celery_plus.model.capped import is_capped

#: Per concurrency group: (group, jobs, slot limit).
GroupRow = tuple[str, int, int | None]


class StatusRows(NamedTuple):
    """What ``status`` reads: (queue, state, count) depths of the waiting, running and failed
    states (and ``reserved``: the running jobs not started yet, counted as running too);
    (queue, since when a job waits) of enqueued and blocked jobs; and per concurrency group,
    its blocked jobs and its running jobs holding one of its slots; and the dead letters the
    failed depths leave out (``Status.unindexed``)."""

    depth: Iterable[tuple[str, str, int]]
    oldest: Iterable[tuple[str, int]]
    blocked: Iterable[GroupRow]
    running: Iterable[GroupRow]
    unindexed: int = 0


def _started_apart(counts: dict[str, int]) -> None:
    """``running`` rows count every running job and ``reserved`` rows the ones not started
    yet: running keeps the others (a capped count, "more than the cap", is kept as it is)."""
    if counts.get("reserved") and not is_capped(counts.get("running", 0)):
        counts["running"] = max(counts.get("running", 0) - counts["reserved"], 0)


def counts_from_rows(rows: Iterable[tuple[str, int]]) -> Counts:
    """Jobs per state from (state, count) rows (unknown states left out); ``reserved`` rows
    count running jobs not started yet, taken out of ``running``."""
    found = dict.fromkeys(Counts.__dataclass_fields__, 0)
    for state, n in rows:
        if state in found:
            found[state] += int(n)
    _started_apart(found)
    return Counts(**found)


def histogram(rows: Iterable[tuple[str, int, int]], buckets: int) -> list[tuple[int, int]]:
    """(completed, failed) per bucket from (state, bucket number, count) rows."""
    out = [[0, 0] for _ in range(buckets)]
    for state, n, count in rows:
        if 0 <= int(n) < buckets:
            out[int(n)][0 if state == "completed" else 1] += int(count)
    return [(c, f) for c, f in out]


def newest_waits(rows: Iterable[tuple[int, str, int | None]], limit: int
                 ) -> list[tuple[str, int]]:
    """(queue, ms waited) of the ``limit`` newest starts from (started ms, queue, ms from
    ready to started) rows; a negative wait (a clock step) counts as 0."""
    known = sorted(((int(start), str(queue), int(wait)) for start, queue, wait in rows
                    if wait is not None), reverse=True)
    return [(queue, max(wait, 0)) for _, queue, wait in known[:limit]]


def leases_from_rows(rows: Iterable[tuple[str, int, int | None, int | None]]
                     ) -> list[WorkerLeases]:
    """Per worker, from (worker id, running jobs, newest lease deadline, oldest start) rows:
    the jobs added up, the newest deadline and the oldest start kept; by worker id."""
    held: dict[str, list[int | None]] = {}
    for worker, n, deadline, start in rows:
        entry = held.setdefault(str(worker), [0, None, None])
        entry[0] = int(entry[0] or 0) + int(n)
        if deadline is not None:
            entry[1] = max(int(deadline), entry[1] if entry[1] is not None else int(deadline))
        if start is not None:
            entry[2] = min(int(start), entry[2] if entry[2] is not None else int(start))
    return [WorkerLeases(worker, int(n or 0), deadline or 0, start or 0)
            for worker, (n, deadline, start) in sorted(held.items())]


def status_from_rows(now_ms: int, counts: Counts, rows: StatusRows) -> Status:
    """Assemble a ``Status`` from the store's :class:`StatusRows`."""
    per: dict[str, dict[str, int]] = {}
    for queue, state, n in rows.depth:
        states = per.setdefault(queue, {})
        states[state] = states.get(state, 0) + int(n)
    oldest: dict[str, int] = {}
    for queue, since in rows.oldest:
        oldest[queue] = min(int(since), oldest.get(queue, int(since)))
    groups: dict[str, dict[str, int]] = {}
    for kind, group_rows in (("blocked", rows.blocked), ("running", rows.running)):
        for group, n, limit in group_rows:
            g = groups.setdefault(group, {"blocked": 0, "limit": 0, "running": 0})
            g[kind] += int(n)
            g["limit"] = max(g["limit"], int(limit or 0))
    for states in per.values():
        _started_apart(states)
    queues = [QueueStatus(queue=q, oldest_waiting_ms=oldest.get(q), **per[q])
              for q in sorted(per)]
    group_status = [GroupStatus(group=g, running=v["running"], limit=v["limit"],
                                blocked=v["blocked"]) for g, v in sorted(groups.items())]
    return Status(now_ms=now_ms, counts=counts, queues=queues, groups=group_status,
                  oldest_waiting_ms=min(oldest.values()) if oldest else None,
                  unindexed=rows.unindexed)
