"""A settle queued while the prefetch window is full waits, at most ``SETTLE_RIDE_S``, for the
claim that freed slots bring (``transport/event_loop.py``, issue #29).

The loop driver runs here on a recording hub and transport: what is tested is when it asks the
transport to drain (store the settles, with a claim if a channel has room).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from celery_plus.transport.event_loop import SETTLE_RIDE_S, LoopDriver


class Hub:
    def __init__(self) -> None:
        self.timers: list[tuple[float, Callable[..., None], tuple[Any, ...]]] = []

    def call_later(self, delay: float, callback: Callable[..., None], *args: Any) -> None:
        self.timers.append((delay, callback, args))

    def settle_timers(self) -> list[float]:
        return [delay for delay, _, _ in self.timers if delay == SETTLE_RIDE_S]

    def fire(self) -> None:
        timers, self.timers = self.timers, []
        for _, callback, args in timers:
            callback(*args)


class Holdings:
    def __init__(self) -> None:
        self.pending = 0

    def has_settles(self) -> bool:
        return self.pending > 0


class Channel:
    def __init__(self) -> None:
        self.room = False

    def wants_jobs(self) -> bool:
        return self.room


class Transport:
    """Drains store every pending settle (with a claim when the channel has room)."""

    def __init__(self) -> None:
        self.holdings = Holdings()
        self.channel = Channel()
        self.drains: list[tuple[int, bool]] = []  # (settles stored, with a claim)
        self.config = type("Config", (), {"poll_interval": 1.0})()

    def new_backend(self) -> None:
        raise AssertionError("the waiter thread is not started here")

    def _live_channels(self) -> list[Channel]:
        return [self.channel]

    def _drain_ready(self, transient_watched: bool = False) -> int:
        self.drains.append((self.holdings.pending, self.channel.room))
        self.holdings.pending = 0
        return 0

    def _wait_plan(self, wait: float) -> tuple[list[str], list[str], float, bool]:
        return ([], [], wait, not self.channel.room)


@pytest.fixture
def loop() -> Iterator[tuple[LoopDriver, Transport, Hub]]:
    transport, hub = Transport(), Hub()
    driver = LoopDriver(transport, hub)  # type: ignore[arg-type]
    driver._on_tick()  # the first turn drains once, as a started loop does
    transport.drains.clear()
    hub.timers.clear()
    yield driver, transport, hub
    driver.pipe.close()


def test_a_settle_with_room_to_claim_is_stored_at_once_with_the_claim(loop: Any) -> None:
    driver, transport, _hub = loop
    transport.channel.room = True
    transport.holdings.pending = 1
    driver._on_tick()
    assert transport.drains == [(1, True)]


def test_settles_without_room_wait_and_ride_on_the_claim_that_freed_slots_bring(
        loop: Any) -> None:
    driver, transport, hub = loop
    transport.holdings.pending = 1
    driver._on_tick()
    transport.holdings.pending = 2
    driver._on_tick()
    assert transport.drains == []
    assert hub.settle_timers() == [SETTLE_RIDE_S]
    transport.channel.room = True  # a third result freed enough of the window
    transport.holdings.pending = 3
    driver._on_tick()
    assert transport.drains == [(3, True)]


def test_settles_without_room_go_alone_when_their_wait_is_over(loop: Any) -> None:
    driver, transport, hub = loop
    transport.holdings.pending = 2
    driver._on_tick()
    assert transport.drains == []
    hub.fire()  # SETTLE_RIDE_S later, the window still full
    driver._on_tick()
    assert transport.drains == [(2, False)]
    transport.holdings.pending = 1  # the next settle waits again, with a timer of its own
    driver._on_tick()
    assert transport.drains == [(2, False)]
    assert hub.settle_timers() == [SETTLE_RIDE_S]
