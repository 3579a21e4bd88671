"""The process's claims and pending settles (``transport/holdings.py``): pure bookkeeping."""

from __future__ import annotations

import gc
import threading

import pytest

from celery_plus.leases.holdings import SURE_SHARE, Holdings
from celery_plus.leases.settles import plain_settle
from celery_plus.leases.tokens import delivery_tag
from celery_plus.model.store import Claim, Settle, Verdict

RENEWED, ENDED, LOST = Verdict.RENEWED, Verdict.ENDED, Verdict.LOST


def claims(*ids: str) -> list[Claim]:
    return [Claim(job_id, 1, b"{}", 1, "q") for job_id in ids]


def book_with(*ids: str) -> Holdings:
    book = Holdings(lease_s=10.0)
    book.claimed(claims(*ids), asked_at=100.0)
    return book


def test_every_claim_is_renewed_delivered_or_not_until_its_settle_lands() -> None:
    book = book_with("a", "b")
    book.delivered(delivery_tag("a", 1))
    assert sorted(book.renewable()) == [("a", 1), ("b", 1)]
    book.settle("a", 1, "ack")
    assert ("a", 1) in book.renewable()  # its ack is not stored yet
    settles = book.take_settles()
    book.landed(settles)
    assert book.renewable() == [("b", 1)]


def test_a_failed_store_call_keeps_its_settles_first_in_line() -> None:
    book = book_with("a", "b", "c")
    book.settle("a", 1, "ack")
    book.settle("b", 1, "reject")
    taken = book.take_settles()
    book.settle("c", 1, "ack")
    book.failed(taken)
    assert [(s.job_id, s.action) for s in book.take_settles()] == [
        ("a", "ack"), ("b", "reject"), ("c", "ack")]
    assert len(book.renewable()) == 3


def test_a_second_settle_of_one_delivery_is_ignored() -> None:
    book = book_with("a")
    book.settle("a", 1, "ack")
    book.settle("a", 1, "requeue")
    assert [s.action for s in book.take_settles()] == ["ack"]


def test_a_lost_claim_is_no_longer_renewed_and_its_settle_is_dropped() -> None:
    book = book_with("a", "b")
    book.settle("a", 1, "ack")
    ends = book.confirmed([("a", 1), ("b", 1)], [LOST, LOST], asked_at=105.0)
    assert ends == ([("a", 1), ("b", 1)], [])
    assert book.take_settles() == []
    assert book.renewable() == []
    assert book.is_lost(delivery_tag("b", 1))
    book.settle("b", 1, "ack")  # the late ack of a lost claim needs no store call
    assert book.take_settles() == [] and len(book) == 0


def test_a_heartbeat_confirms_the_lease_of_what_it_renewed() -> None:
    book = book_with("a", "b")
    assert book.sure_until(delivery_tag("a", 1)) == 100.0 + 10.0 * SURE_SHARE
    book.confirmed([("a", 1), ("b", 1)], [RENEWED, LOST], asked_at=107.0)
    assert book.sure_until(delivery_tag("a", 1)) == 107.0 + 10.0 * SURE_SHARE
    assert book.sure_until(delivery_tag("b", 1)) == float("-inf")
    assert book.sure_until(delivery_tag("zz", 1)) is None


def test_a_claim_its_run_ended_is_over_but_not_lost() -> None:
    # Its ack crossed the heartbeat, or its run continued it (a retry): no longer renewed,
    # its moot settle dropped, but not lost (nothing took it over: not announced, not stopped).
    book = book_with("a", "b")
    book.settle("a", 1, "ack")
    ends = book.confirmed([("a", 1), ("b", 1)], [ENDED, ENDED], asked_at=105.0)
    assert ends == ([], [("a", 1), ("b", 1)])
    assert book.renewable() == [] and book.take_settles() == []
    assert book.get(delivery_tag("a", 1)) is None and book.is_lost(delivery_tag("b", 1))
    # Asked again (a start check), an ended claim is not ended twice.
    assert book.confirmed([("b", 1)], [ENDED], asked_at=106.0) == ([], [])


def test_one_job_held_under_two_tokens_gets_each_claims_own_verdict() -> None:
    # Task.replace (or a retry) continued claim 1 of job "a", and the continuation was
    # claimed here (token 2) before the replaced run's ack landed. The store answers per
    # claim: claim 1 ended by its run, claim 2 renewed (confirmed, never marked lost).
    book = book_with("a")
    book.claimed([Claim("a", 2, b"{}", 1, "q")], asked_at=103.0)
    ends = book.confirmed([("a", 1), ("a", 2)], [ENDED, RENEWED], asked_at=105.0)
    assert ends == ([], [("a", 1)])
    assert book.is_lost(delivery_tag("a", 1)) and not book.is_lost(delivery_tag("a", 2))
    assert book.sure_until(delivery_tag("a", 2)) == 105.0 + 10.0 * SURE_SHARE
    assert book.renewable() == [("a", 2)]
    # Lost later, claim 2 alone is.
    assert book.confirmed([("a", 2)], [LOST], asked_at=107.0) == ([("a", 2)], [])
    assert book.is_lost(delivery_tag("a", 2))


def test_a_claim_by_id_is_held_renewed_and_ended_like_any_claim() -> None:
    # The coordination store's claims (Backend.claim_job), one at a time, in the same ledger.
    book = Holdings(lease_s=10.0)
    book.hold("a", 3, asked_at=100.0)
    book.hold("b", 1, asked_at=101.0)
    assert sorted(book.renewable()) == [("a", 3), ("b", 1)]
    assert book.sure_until(delivery_tag("a", 3)) == 100.0 + 10.0 * SURE_SHARE
    ends = book.confirmed([("a", 3), ("b", 1)], [RENEWED, LOST], asked_at=104.0)
    assert ends == ([("b", 1)], [])
    assert book.renewable() == [("a", 3)]
    assert book.sure_until(delivery_tag("a", 3)) == 104.0 + 10.0 * SURE_SHARE


def test_forgetting_a_claim_says_until_when_it_was_certainly_ours() -> None:
    # A holder that stores its settle itself lets go of the claim and learns whether it was
    # suspect (past that time: it may have been recovered meanwhile).
    book = Holdings(lease_s=10.0)
    book.hold("a", 1, asked_at=100.0)
    book.hold("b", 1, asked_at=100.0)
    book.confirmed([("b", 1)], [ENDED], asked_at=102.0)
    assert book.forget(delivery_tag("a", 1)) == 100.0 + 10.0 * SURE_SHARE
    assert book.forget(delivery_tag("b", 1)) == float("-inf")  # found over: suspect
    assert book.forget(delivery_tag("a", 1)) is None  # not held (any more): suspect
    assert book.renewable() == [] and len(book) == 0
    assert book.take_settles() == []


def test_a_heartbeats_answer_needs_a_verdict_per_claim() -> None:
    book = book_with("a", "b")
    with pytest.raises(ValueError):
        book.confirmed([("a", 1), ("b", 1)], [LOST], asked_at=105.0)
    assert sorted(book.renewable()) == [("a", 1), ("b", 1)]


def test_a_kept_delivery_is_released_once_its_message_is_gone_unsettled() -> None:
    class Message:
        pass

    book = book_with("a", "b")
    kept_a, kept_b = Message(), Message()
    book.keep(delivery_tag("a", 1), kept_a)
    book.keep(delivery_tag("b", 1), kept_b)
    book.settle("b", 1, "ack")  # the task still ran and acked
    del kept_a, kept_b
    gc.collect()
    assert sorted((s.job_id, s.action) for s in book.take_settles()) == [
        ("a", "release"), ("b", "ack")]


def test_a_kept_message_collected_while_its_holdings_are_locked_deadlocks_nothing() -> None:
    """The garbage collector runs in whichever thread allocates, also inside a section
    holding the holdings' lock (a heartbeat's answer, a settle), and runs the finalizer of a
    kept message there. It used to take that lock again: the thread waited for itself, and
    the worker's event loop and lease keeper with it (a worker went silent after a
    reconnect, and its jobs ran again once their leases lapsed)."""

    class Message:
        def __init__(self) -> None:
            self.cycle = self  # freed by the collector only, as Celery's requests are

    book = book_with("a")
    message = Message()
    book.keep(delivery_tag("a", 1), message)
    del message
    gc.disable()  # the collection below must be the one that frees it
    try:
        def collect_while_locked() -> None:
            with book._lock:
                gc.collect()

        thread = threading.Thread(target=collect_while_locked, daemon=True)
        thread.start()
        thread.join(5)
    finally:
        gc.enable()
    assert not thread.is_alive(), "the finalizer waited for the lock its own thread held"
    assert [(s.job_id, s.action) for s in book.take_settles()] == [("a", "release")]


def test_a_kept_delivery_dropped_in_a_cycle_is_released_by_the_keepers_collection() -> None:
    """Celery's dropped requests reference their messages in cycles: only a full collection
    frees them, which a quiet process may not run for minutes, its claims renewed meanwhile
    and never run (a Redis store refusing writes for 3 s: 6 jobs held for good). The lease
    keeper runs one while a kept delivery is unsettled."""

    class Message:
        def __init__(self) -> None:
            self.cycle = self

    book = book_with("a")
    message = Message()
    book.keep(delivery_tag("a", 1), message)
    gc.disable()
    try:
        assert book.collect_kept(every_s=0)  # still referenced: nothing released
        assert book.take_settles() == []
        del message
        assert not book.collect_kept(every_s=3600)  # at most every every_s
        assert book.take_settles() == []
        assert book.collect_kept(every_s=0)
    finally:
        gc.enable()
    assert [(s.job_id, s.action) for s in book.take_settles()] == [("a", "release")]
    assert not book.collect_kept(every_s=0)  # nothing kept any more: no collection


def test_collections_that_free_no_kept_delivery_wait_longer_and_longer(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A kept delivery still running (a long task) would otherwise cost a full collection
    every turn for as long as it runs: each one that frees nothing doubles the wait, up to
    ``KEPT_COLLECT_MAX_S``; one that frees a kept delivery starts again from ``every_s``."""
    from celery_plus.leases import holdings as module

    now = [1000.0]
    monkeypatch.setattr(module.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(module.gc, "collect", lambda: 0)
    class Message:
        pass

    book = book_with("a", "b")
    running = [Message(), Message()]
    book.keep(delivery_tag("a", 1), running[0])
    book.keep(delivery_tag("b", 1), running[1])
    waits = []
    last = now[0]
    while now[0] < 1000.0 + 400:
        now[0] += 1.0
        if book.collect_kept(every_s=2.0):
            waits.append(now[0] - last)
            last = now[0]
    assert waits[:7] == [1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 60.0]
    assert set(waits[7:]) == {60.0}
    book.settle("a", 1, "ack")  # a kept delivery goes: back to every_s
    now[0] += 60.0
    assert book.collect_kept(every_s=2.0)
    now[0] += 2.0
    assert book.collect_kept(every_s=2.0)


def test_undelivered_claims_are_the_ones_to_give_back() -> None:
    book = book_with("a", "b", "c")
    book.delivered(delivery_tag("a", 1))
    book.settle("c", 1, "fail")  # malformed: dead-lettered at delivery
    assert book.undelivered([delivery_tag(j, 1) for j in "abc"]) == [delivery_tag("b", 1)]


def test_a_plain_settle_keeps_its_meaning_in_printable_ascii() -> None:
    name = b"bad-\xff-name".decode(errors="surrogateescape")
    settle = Settle("a", 1, "fail", {"reason": "task failed", "exc_message": f"{name} \x00 é",
                                     "n": 3})
    plain = plain_settle(settle)
    text = plain.detail["exc_message"]  # type: ignore[index]
    assert text.isascii() and "\x00" not in text
    assert "bad-" in text and "\\x00" in text and "\\xe9" in text
    assert plain.detail["n"] == 3 and plain.action == "fail"  # type: ignore[index]
    assert plain_settle(Settle("a", 1, "ack")) == Settle("a", 1, "ack")
