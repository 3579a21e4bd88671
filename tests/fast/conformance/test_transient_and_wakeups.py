"""Conformance: transient queues, bindings and idle wake-ups (DESIGN §3.2 fanout and remote
control; §1.6 no polling).

Rules: a transient queue (remote control, replies, events) is FIFO, can be purged, and its
messages expire 300 s after its last push; bindings are a set per exchange, and a binding bound
with a lifetime lapses at its end unless bound again (a permanent one stays); a transient mark
on a queue lasts its lifetime and is extended by marking again; ``wait`` returns
ready work at once, is woken by a publish on one of its queues or a transient message from
another thread, ends no later than a job scheduled on its queues meanwhile is due, and
otherwise lasts its timeout — work for other queues does not end it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from celery_plus.model.store import Backend
from tests.inspectors import Inspector

from .support import Q, publish

TRANSIENT_TTL_MS = 300_000


def test_a_transient_queue_is_fifo_and_purgeable(backend: Backend) -> None:
    assert backend.pop_transient("r.pidbox") is None
    backend.push_transient("r.pidbox", b"one")
    backend.push_transient("r.pidbox", b"two")
    assert backend.transient_size("r.pidbox") == 2
    assert backend.pop_transient("r.pidbox") == b"one"
    assert backend.pop_transient("r.pidbox") == b"two"
    assert backend.pop_transient("r.pidbox") is None
    for body in (b"x", b"y", b"z"):
        backend.push_transient("other", body)
    assert backend.purge_transient("other") == 3
    assert backend.transient_size("other") == 0 and backend.pop_transient("other") is None


def test_transient_messages_expire_300_s_after_the_last_push(backend: Backend,
                                                             inspect: Inspector) -> None:
    assert inspect.transient_deadline("q.reply") is None
    before = backend.now_ms()
    backend.push_transient("q.reply", b"first")
    first = inspect.transient_deadline("q.reply")
    assert first is not None and before + TRANSIENT_TTL_MS - 5 <= first
    assert first <= backend.now_ms() + TRANSIENT_TTL_MS + 5
    # A later push moves the whole queue's deadline.
    later = backend.now_ms()
    backend.push_transient("q.reply", b"second")
    second = inspect.transient_deadline("q.reply")
    assert second is not None and second >= later + TRANSIENT_TTL_MS - 5 and second >= first
    backend.purge_transient("q.reply")
    assert inspect.transient_deadline("q.reply") is None


def test_bindings_are_a_set_per_exchange(backend: Backend) -> None:
    backend.bind("ex", "rk\x06\x16\x06\x16q1")
    backend.bind("ex", "rk\x06\x16\x06\x16q2")
    backend.bind("ex", "rk\x06\x16\x06\x16q2")
    assert sorted(backend.bindings("ex")) == ["rk\x06\x16\x06\x16q1", "rk\x06\x16\x06\x16q2"]
    backend.unbind("ex", "rk\x06\x16\x06\x16q1")
    assert backend.bindings("ex") == ["rk\x06\x16\x06\x16q2"]
    assert backend.bindings("none") == []


def test_a_binding_with_a_lifetime_lapses_unless_bound_again(backend: Backend) -> None:
    gone, kept, permanent = (f"\x06\x16\x06\x16{q}.pidbox" for q in ("gone", "kept", "perm"))
    backend.bind("ex", gone, ttl_ms=300)
    backend.bind("ex", kept, ttl_ms=300)
    backend.bind("ex", permanent)
    assert sorted(backend.bindings("ex")) == sorted([gone, kept, permanent])
    time.sleep(0.2)
    backend.bind("ex", kept, ttl_ms=300)  # its consumer's refresh
    time.sleep(0.2)
    assert sorted(backend.bindings("ex")) == sorted([kept, permanent])
    time.sleep(0.25)
    assert backend.bindings("ex") == [permanent]
    # A lapsed binding comes back when its consumer binds it again.
    backend.bind("ex", gone, ttl_ms=60_000)
    assert sorted(backend.bindings("ex")) == sorted([gone, permanent])


def test_binding_again_without_a_lifetime_makes_it_permanent(backend: Backend) -> None:
    binding = "rk\x06\x16\x06\x16q"
    backend.bind("ex", binding, ttl_ms=200)
    backend.bind("ex", binding)
    time.sleep(0.3)
    assert backend.bindings("ex") == [binding]
    backend.unbind("ex", binding)
    backend.bind("ex", binding, ttl_ms=200)
    time.sleep(0.3)
    assert backend.bindings("ex") == []


def test_a_transient_mark_lasts_its_lifetime_and_is_extended_by_marking_again(
        backend: Backend) -> None:
    assert not backend.is_marked_transient("oid-1")
    backend.mark_transient("oid-1", 300)
    backend.mark_transient("oid-2", 300)
    assert backend.is_marked_transient("oid-1") and backend.is_marked_transient("oid-2")
    time.sleep(0.2)
    backend.mark_transient("oid-2", 300)
    time.sleep(0.2)
    assert not backend.is_marked_transient("oid-1")
    assert backend.is_marked_transient("oid-2")
    assert not backend.is_marked_transient("never-marked")


def test_wait_returns_ready_work_at_once(backend: Backend) -> None:
    publish(backend, "a")
    assert backend.wait([Q], [], timeout=5) == ("wake", Q, None)
    backend.push_transient("x.pidbox", b"hello")
    assert backend.wait([], ["x.pidbox"], timeout=5) == ("transient", "x.pidbox", b"hello")
    assert backend.transient_size("x.pidbox") == 0
    assert backend.wait([], [], timeout=5) is None


def _wait_while(backend: Backend, action: Callable[[], object], queues: list[str],
                transient: list[str], timeout: float) -> tuple[object, float]:
    """Run ``action`` in another thread 0.1 s into a wait; (the wait's result, its length)."""
    timer = threading.Timer(0.1, action)
    started = time.monotonic()
    timer.start()
    try:
        result = backend.wait(queues, transient, timeout=timeout)
    finally:
        timer.join()
    return result, time.monotonic() - started


def test_wait_is_woken_by_a_publish_on_its_queue(make_backend: Callable[..., Backend]) -> None:
    waiter, other = make_backend(), make_backend()
    result, took = _wait_while(waiter, lambda: publish(other, "a"), [Q], [], timeout=20)
    assert result == ("wake", Q, None)
    assert took < 10, "the wait lasted its timeout"


def test_wait_ends_by_the_time_a_job_scheduled_during_it_is_due(
        make_backend: Callable[..., Backend]) -> None:
    # An idle consumer must learn of a countdown/retry job in time to run it when due (Redis
    # wakes the wait at once, so the consumer's next claim reads the due time; the SQL stores
    # end the wait when the job is due), not at its next poll.
    waiter, other = make_backend(), make_backend()
    result, took = _wait_while(
        waiter, lambda: publish(other, "soon", eta_ms=other.now_ms() + 300), [Q], [], timeout=4)
    assert result == ("wake", Q, None), "the wait lasted its timeout"
    assert took < 3


def test_wait_is_woken_by_a_transient_message_from_another_thread(
        make_backend: Callable[..., Backend]) -> None:
    waiter, other = make_backend(), make_backend()
    result, took = _wait_while(waiter, lambda: other.push_transient("w.pidbox", b"ping"),
                               [Q], ["w.pidbox"], timeout=20)
    assert result == ("transient", "w.pidbox", b"ping")
    assert took < 10, "the wait lasted its timeout"


def test_an_idle_wait_lasts_its_timeout_despite_other_queues_work(
        make_backend: Callable[..., Backend]) -> None:
    waiter, other = make_backend(), make_backend()
    started = time.monotonic()
    assert waiter.wait([Q], ["mine.pidbox"], timeout=0.3) is None
    assert time.monotonic() - started >= 0.28
    result, took = _wait_while(waiter, lambda: publish(other, "elsewhere", queue="other-queue"),
                               [Q], [], timeout=0.6)
    assert result is None
    assert took >= 0.58
