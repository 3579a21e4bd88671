"""Hold chosen locks across ``os.fork`` so no helper thread is inside a C library then.

A prefork worker forks replacement pool processes from a parent whose helper threads (the
store waiter, the lease keeper) use the store all the time. A thread inside SQLite at the
moment of the fork leaves SQLite's process-wide mutexes locked in the child, and the child's
first ``sqlite3.connect`` then waits forever (seen as a prefork pool wedged after a pool
process was killed). Objects that guard such a library with one lock register here; the
lock is taken before every fork and given back after it, in the parent and in the child.
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from typing import Any, Protocol


class ForkGuarded(Protocol):
    def fork_lock(self) -> Any:
        """The lock every use of the guarded library holds (re-read: it may be replaced)."""


_guarded: weakref.WeakSet[Any] = weakref.WeakSet()
_held: list[Any] = []
_registry_lock = threading.Lock()


def guard_across_fork(owner: ForkGuarded) -> None:
    """Take ``owner.fork_lock()`` before each fork of this process (until ``owner`` is gone)."""
    with _registry_lock:
        _guarded.add(owner)


def _take(owner: ForkGuarded) -> Any:
    while True:
        lock = owner.fork_lock()
        lock.acquire()
        if lock is owner.fork_lock():
            return lock
        lock.release()  # replaced while we waited: take the current one


def _before_fork() -> None:
    _registry_lock.acquire()
    _held.extend(_take(owner) for owner in list(_guarded))


def _after_fork() -> None:
    for lock in reversed(_held):
        with contextlib.suppress(RuntimeError):
            lock.release()
    _held.clear()
    with contextlib.suppress(RuntimeError):
        _registry_lock.release()


os.register_at_fork(before=_before_fork, after_in_parent=_after_fork,
                    after_in_child=_after_fork)
