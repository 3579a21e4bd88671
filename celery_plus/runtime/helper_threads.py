"""celery-plus's helper threads: real OS threads that leave signals to the main thread.

**Signals.** A signal sent to a process (``kill(pid, SIGTERM)``: Celery terminating a task,
billiard stopping a pool process, Ctrl-C) is handed by the kernel to any one of its threads
that does not block it. Python runs its handlers in the main thread whichever thread took the
signal, so a signal taken by a helper thread is handled late and in the wrong place: billiard
masks SIGTERM in the main thread while a dying pool process writes its last message to the
shared result pipe, and that mask only protects the pipe's lock if no other thread of the
process can take the signal. A pool process that published through ``plus+postgresql://`` has
psycopg_pool's threads; without this, ``revoke(terminate=True)`` of one of its tasks could
leave the result pipe's lock held by a dead process and wedge every other pool process (found
by the compatibility suite). Threads started inside :func:`signals_blocked` inherit a mask that
blocks every signal; :class:`HelperThread` starts that way.

**Green pools.** Under ``-P gevent`` / ``-P eventlet`` the ``threading`` module is
monkey-patched and a ``threading.Thread`` is a greenlet: one CPU-bound task starves it, and
a lease keeper that cannot renew loses its jobs to another worker, which runs them again.
A :class:`HelperThread` is always a real OS thread (started with the unpatched
``_thread.start_new_thread``); it waits on a :class:`NativeEvent`, and the state it shares
with the main thread is guarded by :func:`native_lock` locks, held only around plain data
operations. I/O objects are not shared: a green socket or lock belongs to the thread whose hub
made it, so each OS thread gets a store backend of its own (``Transport.backend``).
"""

from __future__ import annotations

import _thread
import contextlib
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import Any


def green_patcher() -> str | None:
    """"gevent" or "eventlet" if it monkey-patched ``threading`` in this process."""
    if "gevent.monkey" in sys.modules:
        from gevent import monkey

        if monkey.is_module_patched("threading"):
            return "gevent"
    if "eventlet.patcher" in sys.modules:
        from eventlet import patcher

        if patcher.is_monkey_patched("thread"):
            return "eventlet"
    return None


def _original(name: str) -> Any:
    """``_thread.<name>`` as it was before gevent or eventlet monkey-patched it."""
    patcher = green_patcher()
    if patcher == "gevent":
        from gevent import monkey

        return monkey.get_original("_thread", name)
    if patcher == "eventlet":
        from eventlet.patcher import original

        return getattr(original("_thread"), name)
    return getattr(_thread, name)


def green_patched() -> bool:
    """True when gevent or eventlet monkey-patched ``threading`` in this process."""
    return green_patcher() is not None


def native_ident() -> int:
    """The OS thread's identity (under green patching ``get_ident`` names a greenlet)."""
    ident: Callable[[], int] = _original("get_ident")
    return ident()


def native_lock() -> Any:
    """A lock that blocks the OS thread, shareable between a helper thread and greenlets.

    Hold it only around plain data operations (nothing that could switch greenlets), or a
    greenlet waiting for it would stall its whole thread.
    """
    allocate: Callable[[], Any] = _original("allocate_lock")
    return allocate()


class NativeEvent:
    """A ``threading.Event`` that works across OS threads under green patching too."""

    def __init__(self) -> None:
        self._flag = False
        self._gate = native_lock()
        self._gate.acquire()

    def set(self) -> None:
        if not self._flag:
            self._flag = True
            with contextlib.suppress(RuntimeError):  # released already
                self._gate.release()

    def is_set(self) -> bool:
        return self._flag

    def clear(self) -> None:
        """Unset; a :meth:`set` racing with it leaves the event set (never lost)."""
        if self._flag:
            self._flag = False
            self._gate.acquire(False)
            if self._flag:  # set() ran in between, after the gate was taken back
                with contextlib.suppress(RuntimeError):
                    self._gate.release()

    def wait(self, timeout: float | None = None) -> bool:
        """Block the calling OS thread until set or ``timeout`` seconds; True if set."""
        if self._flag:
            return True
        if self._gate.acquire(True, -1 if timeout is None else max(timeout, 0)):
            self._gate.release()
        return self._flag


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
    """A real OS thread (also under gevent/eventlet) that starts with every signal blocked.

    Under green patching it is started with the unpatched ``start_new_thread`` and runs
    :meth:`run` directly: ``join``/``is_alive`` are not available then (helper threads are
    daemons told to stop, never joined).
    """

    def start(self) -> None:
        with signals_blocked():
            if not green_patched():
                super().start()
                return
            start_native: Callable[..., int] = _original("start_new_thread")
            start_native(self._run_native, ())

    def _run_native(self) -> None:
        try:
            self.run()
        except BaseException:
            threading.excepthook(threading.ExceptHookArgs((*sys.exc_info(), self)))


__all__ = ["HelperThread", "NativeEvent", "green_patched", "green_patcher", "native_ident",
           "native_lock", "signals_blocked"]
