"""A stop asked for during a short critical step takes effect once the step is done.

Celery's beat stops on SIGTERM or SIGINT by raising ``SystemExit`` wherever its main thread
is. Between the store's commit of a tick and the line logging it, that left a tick fired and
never logged. Inside :func:`stop_deferred` the first such signal is noted and acted on (the
handler that was there before, or the default action) as the block ends, or once
``grace_s`` has passed if the block is still running (a slow or locked store); a second one
acts at once, as before.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

#: The signals Celery's beat and worker stop on.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
#: How long a stop waits for the block at most (seconds).
GRACE_S = 2.0


@contextmanager
def stop_deferred(signums: tuple[int, ...] = STOP_SIGNALS,
                  grace_s: float = GRACE_S) -> Iterator[None]:
    """Hold ``signums`` while the block runs (main thread only; elsewhere it does nothing)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: dict[int, Any] = {}
    arrived: list[int] = []
    timers: list[threading.Timer] = []
    # A grace timer signals only until the stop is acted on: one firing later would stop the
    # process a second time, in the middle of its shutdown. Reentrant: ``note`` runs in the
    # main thread, which may hold it in ``end_timers`` already.
    ended = threading.Event()
    ending = threading.RLock()

    def resend(signum: int) -> None:
        with ending:
            if not ended.is_set():
                os.kill(os.getpid(), signum)

    def end_timers() -> None:
        with ending:
            ended.set()
        for timer in timers:
            timer.cancel()

    def note(signum: int, frame: FrameType | None) -> None:
        if arrived:  # the second, or the first again after the grace: act now
            arrived.clear()
            end_timers()
            _restore(previous)
            signal.raise_signal(signum)
            return
        arrived.append(signum)
        timer = threading.Timer(grace_s, resend, (signum,))
        timer.daemon = True
        timers.append(timer)
        timer.start()

    try:
        for signum in signums:
            handler = signal.getsignal(signum)
            if handler is None or handler is signal.SIG_IGN:
                continue  # not installed from Python, or ignored: leave it alone
            previous[signum] = handler
            signal.signal(signum, note)
        yield
    finally:
        end_timers()  # a signal a timer sent before this lands on ``note`` (still installed)
        _restore(previous)
        for signum in arrived:
            signal.raise_signal(signum)  # the restored handler runs now


def _restore(previous: dict[int, Any]) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler)
    previous.clear()
