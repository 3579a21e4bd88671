"""While the store wait in flight watches every transient queue, a drain does not pop them
too (``transport/event_loop.py``, issue #29: those pops were a quarter of a prefork drain's
store calls); the wait's own answer brings their next message."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import kombu
import pytest
from kombu import Consumer, Producer, Queue

from celery_plus import settings
from celery_plus.stores.memory.state import forget_named
from celery_plus.stores.registry import open_store
from celery_plus.transport.event_loop import LoopDriver

PIDBOX = "w1@host.celery.pidbox"


class Channel:
    def __init__(self) -> None:
        self.transient_queues = [PIDBOX]

    def wants_jobs(self) -> bool:
        return True


class Transport:
    """Records, for each drain, whether it was told the transient queues are watched."""

    def __init__(self) -> None:
        self.holdings = type("Holdings", (), {"has_settles": lambda self: False})()
        self.channel = Channel()
        self.watched: list[bool] = []
        self.transient = [PIDBOX]
        self.config = type("Config", (), {"poll_interval": 1.0})()

    def new_backend(self) -> None:
        raise AssertionError("the waiter thread is not started here")

    def _live_channels(self) -> list[Channel]:
        return [self.channel]

    def _drain_ready(self, transient_watched: bool = False) -> int:
        self.watched.append(transient_watched)
        return 0

    def _wait_plan(self, wait: float) -> tuple[list[str], list[str], float, bool]:
        return (["work"], list(self.transient), wait, False)


@pytest.fixture
def driver() -> Iterator[tuple[LoopDriver, Transport]]:
    transport = Transport()
    hub = type("Hub", (), {"call_later": lambda self, *a: None})()
    made = LoopDriver(transport, hub)  # type: ignore[arg-type]
    yield made, transport
    made.pipe.close()


def test_a_drain_while_the_wait_in_flight_watches_the_transient_queues_leaves_them(
        driver: Any) -> None:
    loop, transport = driver
    loop._on_tick()  # the first turn: nothing armed yet, so it pops; then it arms the wait
    assert transport.watched == [False]
    assert loop.waiter.armed
    loop._more = True  # a turn that drains again while that wait is in flight
    loop._on_tick()
    assert transport.watched == [False, True]


def test_a_transient_queue_the_wait_does_not_watch_is_popped(driver: Any) -> None:
    loop, transport = driver
    transport.transient = []  # the wait in flight was armed before the queue was consumed
    loop._on_tick()
    assert loop.waiter.armed
    loop._more = True
    loop._on_tick()
    assert transport.watched == [False, False]


@pytest.fixture
def connection() -> Iterator[tuple[kombu.Connection, Any]]:
    name = f"tw{uuid.uuid4().hex[:10]}"
    options = {"plus_key_prefix": name}
    view = open_store(f"memory://{name}", settings.resolve(options))
    conn = kombu.Connection(f"plus+memory://{name}", transport_options=options)
    try:
        yield conn, view
    finally:
        conn.close()
        view.close()
        forget_named(name)


def test_the_transport_pops_a_transient_queue_only_when_it_is_not_watched(
        connection: Any) -> None:
    conn, view = connection
    got: list[Any] = []
    consumer = Consumer(conn, [Queue(PIDBOX, durable=False, auto_delete=True)],
                        callbacks=[lambda body, message: got.append(body)])
    consumer.consume()
    Producer(conn.default_channel).publish({"ping": 1}, routing_key=PIDBOX)
    transport = conn.transport
    assert transport._drain_ready(transient_watched=True) == 0
    assert view.transient_size(PIDBOX) == 1 and got == []
    assert transport._drain_ready() == 1
    assert view.transient_size(PIDBOX) == 0 and got == [{"ping": 1}]
