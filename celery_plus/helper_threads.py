"""Helper threads leave signals to the main thread.

A signal sent to a process (``kill(pid, SIGTERM)``: Celery terminating a task, billiard
stopping a pool process, Ctrl-C) is handed by the kernel to any one of its threads that does
not block it. Python runs its handlers in the main thread whichever thread took the signal, so
a signal taken by a helper thread is handled late and in the wrong place: billiard masks
SIGTERM in the main thread while a dying pool process writes its last message to the shared
result pipe, and that mask only protects the pipe's lock if no other thread of the process can
take the signal. A pool process that published through ``plus+postgresql://`` has psycopg_pool's
threads; without this, ``revoke(terminate=True)`` of one of its tasks could leave the result
pipe's lock held by a dead process and wedge every other pool process (found by the
compatibility suite).

Threads started inside :func:`signals_blocked` inherit a mask that blocks every signal, so
signals always go to the main thread; celery-plus's own threads (:class:`HelperThread`)
start that way.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator


@contextlib.contextmanager
def signals_blocked() -> Iterator[None]:
    """Block every signal in the calling thread for the block: threads started inside it
    keep that mask for life. Pending signals are delivered when the block ends."""
    if not hasattr(signal, "pthread_sigmask"):  # pragma: no cover - not on POSIX
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


class HelperThread(threading.Thread):
    """A thread that starts with every signal blocked (they are the main thread's)."""

    def start(self) -> None:
        with signals_blocked():
            super().start()
