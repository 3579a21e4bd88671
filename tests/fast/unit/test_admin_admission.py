"""Which connection makes room for a new one (``celery_plus/admin/admission.py``) and the fair
sharing of the dashboard's threads (``celery_plus/admin/dispatch.py``), without a server."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from celery_plus.admin.admission import (
    ANONYMOUS_RANK,
    OPERATOR_RANK,
    UNPROVEN,
    Ledger,
    standing_of,
)
from celery_plus.admin.admission import make_room as admit
from celery_plus.admin.dispatch import FIRST, SHARED, FairDispatcher
from tests.support import wait_until


@dataclass(eq=False)
class Conn:
    host: str
    standing: int = UNPROVEN
    since: float = 0.0
    busy: bool = False
    closing: bool = False
    #: The standing its request, arrived since it was taken, would give it.
    arrived: int = UNPROVEN

    def recheck(self) -> bool:
        self.standing = max(self.standing, self.arrived)
        return self.standing != UNPROVEN


def make_room(conns: list[Conn], newcomer: Conn, total: int, per_address: int,
              exempt: str | None = None, slack: int = 0) -> tuple[bool, list[Conn]]:
    """:func:`make_room` with a ledger of ``conns`` (the closing ones left out)."""
    ledger = Ledger()
    for conn in conns:
        if not conn.closing:
            ledger.add(conn)
    return admit(conns, newcomer, ledger, total, per_address, exempt, slack)  # type: ignore[arg-type, return-value]


def test_a_newcomer_of_a_full_address_evicts_that_address_s_stalest_unproven() -> None:
    flood = [Conn("127.0.0.1", since=n) for n in range(3)]
    operator = Conn("127.0.0.1", OPERATOR_RANK, since=-5)  # the oldest, but proven
    other = Conn("127.0.0.2", since=-9)
    newcomer = Conn("127.0.0.1", since=10)
    assert make_room([*flood, operator, other, newcomer], newcomer, 100, 4) == (True, [flood[0]])
    # closing connections are never chosen; at equal standing an idle one goes before one
    # being answered, whatever their age; the operator's goes last
    flood[1].closing = True
    flood[0].standing = flood[2].standing = ANONYMOUS_RANK
    flood[0].busy = True
    assert make_room([*flood, operator, newcomer], newcomer, 100, 3) == (True, [flood[2]])
    # connections being answered go too when the address has no idle one of lower standing:
    # a flood that always has a request waiting is evicted before an idle operator
    flood[2].busy = True
    assert make_room([*flood, operator, newcomer], newcomer, 100, 2) == (
        True, [flood[0], flood[2]])
    operator.busy = True
    assert make_room([*flood, operator, newcomer], newcomer, 100, 3) == (True, [flood[0]])
    # only when the address has no other connection still open may the newcomer not stay
    for conn in (flood[0], flood[2], operator):
        conn.closing = True
    assert make_room([*flood, operator, newcomer], newcomer, 100, 0) == (False, [])


def test_a_full_server_evicts_from_the_address_holding_the_most() -> None:
    heavy = [Conn("127.0.0.3", since=n) for n in range(3)]
    light = Conn("127.0.0.2", since=-1)
    newcomer = Conn("127.0.0.1", since=9)
    assert make_room([light, *heavy, newcomer], newcomer, 4, 10) == (True, [heavy[0]])
    assert make_room([light, *heavy[:2], newcomer], newcomer, 4, 10) == (True, [])
    # the exempt address (a trusted proxy) is not the one made to give way
    assert make_room([light, *heavy, newcomer], newcomer, 4, 10, exempt="127.0.0.3") == (
        True, [light])
    # with slack, enough go at once for the next newcomers to fit without a look
    assert make_room([light, *heavy, newcomer], newcomer, 4, 10, slack=1) == (
        True, heavy[:2])
    # a victim whose request arrived since it was taken is looked at again, and spared
    heavy[0].arrived = OPERATOR_RANK
    assert make_room([light, *heavy, newcomer], newcomer, 4, 10) == (True, [heavy[1]])


def test_a_waiting_request_head_gives_the_standing_of_its_credentials() -> None:
    def rank(header: str | None) -> int:
        return OPERATOR_RANK if header == "Bearer right" else ANONYMOUS_RANK

    assert standing_of(b"GET / HTTP/1.1\r\nHost: x\r\n", rank) == UNPROVEN
    assert standing_of(b"", rank) == UNPROVEN
    assert standing_of(b"GET / HTTP/1.1\r\nauthorization: Bearer right\r\n\r\n", rank) == \
        OPERATOR_RANK
    assert standing_of(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", rank) == ANONYMOUS_RANK


@dataclass(eq=False)
class Task:
    """A channel whose service blocks until released."""

    client: tuple[int, str]
    started: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    finished: threading.Event = field(default_factory=threading.Event)
    requests: list[Any] = field(default_factory=list)

    def service(self) -> None:
        self.started.set()
        self.release.wait(10)
        self.finished.set()

    def cancel(self) -> None:
        self.release.set()


def test_readers_cannot_take_the_operators_threads() -> None:
    dispatcher = FairDispatcher(lambda t: t.client, shared=3, per_client=2, deadline=30,
                                operator_first=0)
    dispatcher.set_thread_count(4)
    try:
        reader = [Task((SHARED, "reader-a")) for _ in range(4)]
        other = Task((SHARED, "reader-b"))
        for task in [*reader, other]:
            dispatcher.add_task(task)
        wait_until(lambda: sum(t.started.is_set() for t in reader) == 2, timeout=5)
        wait_until(other.started.is_set, timeout=5)  # its turn, though it came last
        assert sum(t.started.is_set() for t in reader) == 2  # one client: two at most
        operator = Task((FIRST, "operator"))
        dispatcher.add_task(operator)
        wait_until(operator.started.is_set, timeout=5)  # the thread readers may not use
        reader[0].release.set()
        wait_until(lambda: sum(t.started.is_set() for t in reader) == 3, timeout=5)
    finally:
        for task in [*reader, other, operator]:
            task.release.set()
        dispatcher.shutdown()


def test_no_reader_starts_while_an_operator_is_answered_until_its_first_seconds_pass(
        ) -> None:
    dispatcher = FairDispatcher(lambda t: t.client, shared=3, per_client=3, deadline=30,
                                operator_first=30)
    dispatcher.set_thread_count(5)
    running, later = Task((SHARED, "reader")), Task((SHARED, "reader"))
    operator = Task((FIRST, "operator"))
    try:
        dispatcher.add_task(running)
        wait_until(running.started.is_set, timeout=5)
        dispatcher.add_task(operator)
        wait_until(operator.started.is_set, timeout=5)  # beside the reader already running
        dispatcher.add_task(later)
        # threads and a shared slot free, but the operator's page goes first
        assert not later.started.wait(0.3)
        operator.release.set()
        assert later.started.wait(0.3)  # its page done: readers go on at once
        assert not running.finished.is_set()  # the reader that was running was left alone
    finally:
        for task in (running, later, operator):
            task.release.set()
        dispatcher.shutdown()


@contextlib.contextmanager
def reader_behind_an_operator(operator_first: float, deadline: float
                              ) -> Iterator[tuple[float, Task, Task]]:
    """A reader's request filed while an operator's runs, threads to spare: the seconds it
    waited to start, the operator's task and the reader's (both running)."""
    dispatcher = FairDispatcher(lambda t: t.client, shared=3, per_client=3, deadline=deadline,
                                operator_first=operator_first)
    dispatcher.set_thread_count(3)
    operator = Task((FIRST, "operator"))
    reader = Task((SHARED, "reader"), requests=[type("Request", (), {"error": None})()])
    try:
        dispatcher.add_task(operator)
        wait_until(operator.started.is_set, timeout=5)
        began = time.monotonic()
        dispatcher.add_task(reader)
        wait_until(reader.started.is_set, timeout=5, interval=0.01)
        yield time.monotonic() - began, operator, reader
    finally:
        operator.release.set()
        reader.release.set()
        dispatcher.shutdown()


def test_an_operator_request_past_its_first_seconds_holds_no_reader_back() -> None:
    with reader_behind_an_operator(operator_first=0.5, deadline=30) as (waited, operator, _):
        # when the operator's first half second ended (not at the next one-second poll)
        assert 0.3 <= waited < 0.5 + 0.3
        assert not operator.finished.is_set()  # (it still ran)


def test_readers_held_back_by_overlapping_operators_start_after_half_the_deadline() -> None:
    with reader_behind_an_operator(operator_first=30, deadline=2.0) as (
            waited, operator, reader):
        # held back for half the deadline, then run (not refused 503)
        assert 1.0 <= waited < 1.0 + 0.3
        assert reader.requests[0].error is None and not operator.finished.is_set()


def test_a_held_back_request_out_of_patience_but_without_a_thread_does_not_spin_the_threads(
        ) -> None:
    dispatcher = FairDispatcher(lambda t: t.client, shared=1, per_client=1, deadline=2.0,
                                operator_first=30)
    looks = 0
    choose = dispatcher._next

    def counted(now: float) -> Any:
        nonlocal looks
        looks += 1
        return choose(now)

    dispatcher._next = counted  # type: ignore[method-assign]
    dispatcher.set_thread_count(4)
    operator, holder, waiting = (Task((FIRST, "operator")), Task((SHARED, "a")),
                                 Task((SHARED, "b")))
    try:
        dispatcher.add_task(holder)
        wait_until(holder.started.is_set, timeout=5)
        dispatcher.add_task(operator)
        wait_until(operator.started.is_set, timeout=5)
        dispatcher.add_task(waiting)  # held back, then out of patience at 1 s: no shared room
        before = looks
        time.sleep(1.5)  # (the span measured, not a wait for a condition)
        assert not waiting.started.is_set()
        assert looks - before < 20, looks - before  # (polling each 5 ms: 170 here)
    finally:
        for task in (operator, holder, waiting):
            task.release.set()
        dispatcher.shutdown()


def test_a_request_that_waited_past_the_deadline_is_answered_busy() -> None:
    dispatcher = FairDispatcher(lambda t: t.client, shared=1, per_client=1, deadline=0.2)
    dispatcher.set_thread_count(2)
    holder = Task((SHARED, "a"))
    late = Task((SHARED, "b"), requests=[type("Request", (), {"error": None})()])
    try:
        dispatcher.add_task(holder)
        wait_until(holder.started.is_set, timeout=5)
        dispatcher.add_task(late)
        wait_until(late.started.is_set, timeout=5)  # served while the shared thread is held
        assert late.requests[0].error.to_response()[0] == "503 Service Unavailable"
    finally:
        holder.release.set()
        late.release.set()
        dispatcher.shutdown()


def test_requests_are_filed_by_role_and_the_client_a_trusted_proxy_forwards_for() -> None:
    from types import SimpleNamespace

    from celery_plus.admin.server import _classifier

    def rank(header: str | None) -> int:
        return OPERATOR_RANK if header == "Bearer right" else ANONYMOUS_RANK

    def channel(host: str, **headers: str) -> Any:
        return SimpleNamespace(host=host, standing=UNPROVEN,
                               requests=[SimpleNamespace(headers=headers)])

    classify = _classifier(rank, "127.0.0.4")
    operator = channel("127.0.0.1", AUTHORIZATION="Bearer right")
    assert classify(operator) == (FIRST, (OPERATOR_RANK, "127.0.0.1"))
    assert operator.standing == OPERATOR_RANK
    assert classify(channel("127.0.0.1")) == (SHARED, (ANONYMOUS_RANK, "127.0.0.1"))
    # behind the proxy, each client is its own (the entry the proxy added, the last)
    assert classify(channel("127.0.0.4", X_FORWARDED_FOR="10.0.0.9, 203.0.113.7")) == (
        SHARED, (ANONYMOUS_RANK, "203.0.113.7"))
    # from elsewhere the header says nothing
    assert classify(channel("127.0.0.5", X_FORWARDED_FOR="203.0.113.7")) == (
        SHARED, (ANONYMOUS_RANK, "127.0.0.5"))
