"""``celery_plus/runtime/deferred_stop.py``: a stop signal inside the block lands as it ends;
a second lands at once; the handlers are given back; other threads are left alone."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from types import FrameType

import pytest

from celery_plus.runtime import deferred_stop
from celery_plus.runtime.deferred_stop import stop_deferred


class Stopped(Exception):
    pass


def _stop(signum: int, frame: FrameType | None) -> None:
    raise Stopped(signum)


@pytest.fixture
def stopping() -> Iterator[None]:
    """SIGTERM and SIGINT raise :class:`Stopped` (as Celery's beat raises SystemExit)."""
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    for signum in before:
        signal.signal(signum, _stop)
    try:
        yield
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)


def test_a_stop_inside_the_block_lands_as_it_ends(stopping: None) -> None:
    steps = []
    with pytest.raises(Stopped) as stopped:
        with stop_deferred():
            signal.raise_signal(signal.SIGTERM)
            steps.append("finished")
        steps.append("after the block")
    assert steps == ["finished"] and stopped.value.args == (signal.SIGTERM,)
    assert signal.getsignal(signal.SIGTERM) is _stop
    assert signal.getsignal(signal.SIGINT) is _stop


def test_a_second_stop_lands_at_once(stopping: None) -> None:
    steps = []
    with pytest.raises(Stopped) as stopped, stop_deferred():
        signal.raise_signal(signal.SIGTERM)
        signal.raise_signal(signal.SIGINT)
        steps.append("finished")
    assert steps == [] and stopped.value.args == (signal.SIGINT,)
    assert signal.getsignal(signal.SIGTERM) is _stop
    assert signal.getsignal(signal.SIGINT) is _stop


def test_a_block_without_a_stop_changes_nothing(stopping: None) -> None:
    with stop_deferred():
        assert signal.getsignal(signal.SIGTERM) is not _stop  # held meanwhile
    assert signal.getsignal(signal.SIGTERM) is _stop


def test_outside_the_main_thread_it_touches_no_handler(stopping: None) -> None:
    seen = []

    def run() -> None:
        with stop_deferred():
            seen.append(signal.getsignal(signal.SIGTERM))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    assert seen == [_stop]


def test_a_block_outlasting_the_grace_is_stopped_then(stopping: None) -> None:
    """A fire waiting on a slow or locked store does not hold one SIGTERM back for long."""
    steps = []
    started = time.monotonic()
    with pytest.raises(Stopped) as stopped, stop_deferred(grace_s=0.3):
        signal.raise_signal(signal.SIGTERM)
        steps.append("noted")
        while time.monotonic() - started < 30:  # a step that would go on for 30 s
            time.sleep(0.05)
        steps.append("finished")
    took = time.monotonic() - started
    assert steps == ["noted"] and stopped.value.args == (signal.SIGTERM,)
    assert 0.3 <= took < 10, took
    assert signal.getsignal(signal.SIGTERM) is _stop


def test_a_block_ending_within_the_grace_leaves_no_late_signal(stopping: None) -> None:
    with pytest.raises(Stopped), stop_deferred(grace_s=0.3):
        signal.raise_signal(signal.SIGTERM)
    caught = []
    signal.signal(signal.SIGTERM, lambda n, f: caught.append(n))
    time.sleep(0.6)  # past the grace: a timer left running would signal now
    assert caught == []


def test_a_grace_timer_firing_as_the_block_ends_stops_nothing_twice(
        stopping: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The race of a block that takes just the grace: the timer's resend, run after the
    block ended (here by hand, deterministically), sends no second stop into the shutdown."""
    started: list[threading.Timer] = []

    class Recorded(threading.Timer):
        def start(self) -> None:
            started.append(self)  # not started: the test runs it when it chooses

    monkeypatch.setattr(deferred_stop.threading, "Timer", Recorded)
    with pytest.raises(Stopped), stop_deferred(grace_s=0.3):
        signal.raise_signal(signal.SIGTERM)
    caught = []
    signal.signal(signal.SIGTERM, lambda n, f: caught.append(n))
    assert len(started) == 1
    # The timer fires just after the block ended. A signal this thread sends itself is
    # delivered before os.kill returns, and its handler runs at once, in this thread.
    started[0].function(*started[0].args)
    assert caught == []
