"""The admin's summaries assembled from rows
(``celery_plus.stores.admin_base.aggregates``): rows of one
key add up, so a store may give one row per record or one aggregate per key."""

from __future__ import annotations

from celery_plus.model.admin import Counts, GroupStatus, QueueStatus
from celery_plus.stores.admin_base.aggregates import (
    StatusRows,
    counts_from_rows,
    histogram,
    leases_from_rows,
    newest_waits,
    status_from_rows,
)


def test_counts_add_up_per_state_and_leave_unknown_states_out() -> None:
    rows = [("failed", 2), ("enqueued", 1), ("failed", 1), ("mystery", 9)]
    assert counts_from_rows(rows) == Counts(enqueued=1, failed=3)


def test_histogram_keeps_the_buckets_in_range() -> None:
    rows = [("completed", 0, 2), ("failed", 1, 1), ("completed", 1, 1), ("failed", 3, 5),
            ("completed", -1, 4)]
    assert histogram(rows, 3) == [(2, 0), (1, 1), (0, 0)]


def test_newest_waits_are_the_newest_starts_with_no_negative_wait() -> None:
    rows = [(10, "a", 5), (30, "b", -2), (20, "a", None), (25, "c", 7)]
    assert newest_waits(rows, 2) == [("b", 0), ("c", 7)]


def test_leases_merge_per_worker_rows() -> None:
    rows = [("h:1:x", 1, 500, 100), ("h:2:y", 2, 300, None), ("h:1:x", 1, 700, 50)]
    leases = leases_from_rows(rows)
    assert [(w.worker_id, w.jobs, w.lease_deadline_ms, w.oldest_start_ms) for w in leases] == [
        ("h:1:x", 2, 700, 50), ("h:2:y", 2, 300, 0)]


def test_status_from_per_record_rows_equals_status_from_aggregates() -> None:
    per_record = StatusRows(
        depth=[("mail", "enqueued", 1), ("mail", "enqueued", 1), ("mail", "failed", 1)],
        oldest=[("mail", 200), ("mail", 100)],
        blocked=[("g", 1, 2), ("g", 1, 3)],
        running=[("g", 1, 2), ("h", 1, None)])
    aggregated = StatusRows(
        depth=[("mail", "enqueued", 2), ("mail", "failed", 1)], oldest=[("mail", 100)],
        blocked=[("g", 2, 3)], running=[("g", 1, 2), ("h", 1, None)])
    one, other = (status_from_rows(1000, Counts(enqueued=2, failed=1), rows)
                  for rows in (per_record, aggregated))
    assert one == other
    assert one.queues == [QueueStatus("mail", enqueued=2, failed=1, oldest_waiting_ms=100)]
    assert one.groups == [GroupStatus("g", running=1, limit=3, blocked=2),
                          GroupStatus("h", running=1, limit=0, blocked=0)]
    assert one.oldest_waiting_ms == 100
