"""Issue #27: which runs the lease watch stops (``Holdings.overdue``) and the deadline it
keeps for the guard (``Holdings.sure_of_runs``): pure bookkeeping, times given."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from celery_plus.leases import deadline
from celery_plus.leases.holdings import SURE_SHARE, Holdings
from celery_plus.leases.keeper import clock
from celery_plus.leases.tokens import delivery_tag
from celery_plus.model.store import Claim, Verdict
from celery_plus.runtime.deadline_guard import GuardSlot

LEASE = 10.0


def book_with(*claims: tuple[str, int, float]) -> Holdings:
    book = Holdings(LEASE)
    for job_id, token, at in claims:
        book.claimed([Claim(job_id, token, b"", 1, "q")], at)
        book.delivered(delivery_tag(job_id, token))
    return book


def test_a_claim_is_overdue_once_its_sure_share_has_passed_unconfirmed() -> None:
    book = book_with(("a", 1, 100.0), ("b", 1, 103.0))
    assert book.overdue(100.0 + LEASE * SURE_SHARE - 0.01) == {}
    assert book.overdue(100.0 + LEASE * SURE_SHARE) == {"1:a": LEASE * SURE_SHARE}
    assert set(book.overdue(103.0 + LEASE * SURE_SHARE)) == {"1:a", "1:b"}


def test_a_confirmed_renewal_counts_from_when_it_was_sent() -> None:
    book = book_with(("a", 1, 100.0))
    book.confirmed([("a", 1)], [Verdict.RENEWED], asked_at=105.0)
    assert book.overdue(105.0 + LEASE * SURE_SHARE - 0.01) == {}
    assert "1:a" in book.overdue(105.0 + LEASE * SURE_SHARE)


def test_settled_lost_and_undelivered_claims_are_not_overdue() -> None:
    book = book_with(("a", 1, 0.0), ("b", 1, 0.0))
    book.claimed([Claim("c", 1, b"", 1, "q")], 0.0)  # never delivered
    book.settle("a", 1, "ack")
    book.mark_lost("1:b")
    assert book.overdue(1000.0) == {}


def test_the_guards_deadline_is_the_earliest_sure_time_of_the_runs() -> None:
    book = book_with(("a", 1, 100.0), ("b", 1, 103.0))
    assert book.sure_of_runs(["1:a", "1:b"]) == 100.0 + LEASE * SURE_SHARE
    assert book.sure_of_runs(["1:b", "9:zz"]) == 103.0 + LEASE * SURE_SHARE
    book.settle("a", 1, "ack")
    assert book.sure_of_runs(["1:a"]) == float("inf")
    assert book.sure_of_runs([]) == float("inf")


@pytest.fixture
def slot() -> Iterator[GuardSlot]:
    made = GuardSlot()  # a file in memory of its own: no guard process reads it
    yield made
    made.close()


def test_the_guard_covers_a_run_until_it_ends_even_when_its_ack_cannot_be_stored(
        monkeypatch: pytest.MonkeyPatch, slot: GuardSlot) -> None:
    """A run announced by its task (``run_starts``) is covered by the guard's deadline until
    the watch's next scan, then while Celery lists it as running; once it has ended it is
    not, although its claim stays held (its ack waits for a store that refuses writes). A
    threads worker used to be killed by its guard when that claim's lease passed sure."""
    book = book_with(("a", 1, clock()))
    monkeypatch.setattr(deadline, "_slot", slot)
    monkeypatch.setattr(deadline, "_starting", set())
    monkeypatch.setattr(deadline.holdings, "every", lambda: [book])
    monkeypatch.setattr(deadline.holdings, "find", lambda tag: book)
    running: dict[str, object] = {}

    def scan() -> dict[str, object]:
        if started_during_the_scan:
            deadline.run_starts("1:a")  # the task starts between the scan and the slot
        return dict(running)

    monkeypatch.setattr(deadline, "running_tags", scan)
    watch = deadline.LeaseWatch(slot)
    sure = book.sure_of_runs(["1:a"])
    started_during_the_scan = True
    watch.look()
    assert slot.get() == sure  # announced after the scan began: kept
    started_during_the_scan = False
    running["1:a"] = object()  # Celery lists it as running
    watch.look()
    watch.look()
    assert slot.get() == sure
    del running["1:a"]  # it ended; its ack is not stored (the claim stays held)
    watch.look()
    assert book.sure_of_runs(["1:a"]) == sure
    assert slot.get() == float("inf")
