"""The worker's side of the start marks (docs/admin.md "Reserved and running"): what a
process's holdings put on a heartbeat and on a settle, with no store call of their own.

A claim whose task started (``Holdings.started``, from ``Request.on_accepted``; or a run Celery
reports) is marked with the ms since its start; one not started is ``NOT_STARTED`` in a Celery
worker and not known (None) elsewhere; a settle carries how long its task ran.
"""

from __future__ import annotations

from celery_plus.leases.holdings import Holdings
from celery_plus.leases.keeper import clock
from celery_plus.leases.tokens import delivery_tag
from celery_plus.model.store import NOT_STARTED, Claim


def _holding(*ids: str) -> Holdings:
    book = Holdings(lease_s=30.0)
    book.claimed([Claim(i, n + 1, "{}", 1, "q") for n, i in enumerate(ids)], clock())
    return book


def test_heartbeat_marks_started_reserved_and_unknown() -> None:
    book = _holding("a", "b", "c")
    now = clock()
    book.started(delivery_tag("a", 1), now - 2.5)
    book.started(delivery_tag("a", 1), now - 0.1)  # the first start stays
    running = {delivery_tag("b", 2): now - 1.0}  # a run Celery reports, not marked
    pairs = [("a", 1), ("b", 2), ("c", 3), ("gone", 9)]
    assert book.start_marks(pairs, now, running, True) == [2500, 1000, NOT_STARTED,
                                                           NOT_STARTED]
    assert book.start_marks(pairs, now, {}, False) == [2500, None, None, None]


def test_a_settle_carries_its_run_time_and_a_never_started_one_none() -> None:
    book = _holding("a", "b")
    book.started(delivery_tag("a", 1), clock() - 1.5)
    book.settle("a", 1, "ack")
    book.settle("b", 2, "ack")
    a, b = book.take_settles()
    assert a.job_id == "a" and 1500 <= (a.run_ms or 0) < 3000
    assert b.job_id == "b" and b.run_ms is None
