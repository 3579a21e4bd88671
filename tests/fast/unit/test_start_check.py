"""The start check fails closed on an answer that came too late (issue #27): a renewal counts
from when it was sent, so one answered past the lease's safety margin proves nothing."""

from __future__ import annotations

import time

import pytest

from celery_plus.leases.holdings import Holdings
from celery_plus.leases.keeper import clock
from celery_plus.leases.start_check import LeaseUnknown, asked_store, claim_lost_before_start
from celery_plus.leases.tokens import delivery_tag
from celery_plus.model.store import Verdict

#: A lease a slow answer outlives; the prompt cases use the default 30 s (a loaded machine
#: must not make them late).
SHORT_LEASE_S = 0.2


def booked(job_id: str, token: int, lease_s: float = 30.0) -> tuple[Holdings, str]:
    book = Holdings(lease_s)
    book.hold(job_id, token, clock())
    return book, delivery_tag(job_id, token)


def test_a_prompt_renewal_lets_the_task_start() -> None:
    book, tag = booked("j1", 3)
    assert asked_store(lambda claims: [Verdict.RENEWED], tag, ("j1", 3), book) is False
    assert book.is_lost(tag) is False


def test_a_renewal_answered_past_the_margin_does_not_let_the_task_start() -> None:
    book, tag = booked("j2", 4, SHORT_LEASE_S)

    def slow_heartbeat(claims: list[tuple[str, int]]) -> list[Verdict]:
        time.sleep(SHORT_LEASE_S)  # the answer itself is late: this is the fault under test
        return [Verdict.RENEWED]

    with pytest.raises(LeaseUnknown, match="past the lease's safety margin"):
        asked_store(slow_heartbeat, tag, ("j2", 4), book)


def test_a_lost_lease_is_lost_and_marked() -> None:
    book, tag = booked("j3", 5)
    assert asked_store(lambda claims: [Verdict.LOST], tag, ("j3", 5), book) is True
    assert book.is_lost(tag) is True


def _no_store(claims: list[tuple[str, int]]) -> list[Verdict]:
    raise AssertionError("the store was asked")


def test_the_holdings_answer_before_the_store_is_asked() -> None:
    """One look-up of the holdings decides (``claim_lost_before_start``): a claim known lost
    does not start and a claim confirmed recently starts, both without a store call, even
    past the sure time its delivery carried; a claim held nowhere here asks the store."""
    past = clock() - 1.0
    book, tag = booked("j4", 6)
    assert claim_lost_before_start(tag, ("j4", 6), past, _no_store, book) is False
    book.mark_lost(tag)
    assert claim_lost_before_start(tag, ("j4", 6), past, _no_store, book) is True
    asked: list[list[tuple[str, int]]] = []

    def heartbeat(claims: list[tuple[str, int]]) -> list[Verdict]:
        asked.append(claims)
        return [Verdict.LOST]

    other = Holdings(30.0)
    assert claim_lost_before_start("7:j5", ("j5", 7), past, heartbeat, other) is True
    assert asked == [[("j5", 7)]]
