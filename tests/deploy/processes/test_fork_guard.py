"""A fork waits for any thread inside SQLite, and the child can open the database.

Without the guard a prefork parent forked a replacement pool process while its store-waiter
thread was inside SQLite; the child's first connect then hung on SQLite's inherited mutex.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from pathlib import Path

from celery_plus.stores.sqlite.backend import SQLiteBackend


def _wait_child(pid: int, timeout: float) -> int | None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.01)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return None


def test_a_fork_waits_for_the_thread_inside_sqlite_and_the_child_connects(
        tmp_path: Path) -> None:
    backend = SQLiteBackend(f"sqlite:///{tmp_path / 'store.db'}")
    inside, leave, forked = threading.Event(), threading.Event(), threading.Event()
    children: list[int] = []

    def helper_inside_sqlite() -> None:
        with backend.fork_lock():
            inside.set()
            leave.wait(10)

    def fork() -> None:
        pid = os.fork()
        if pid == 0:  # the child: SQLite must be usable at once
            try:
                conn = sqlite3.connect(backend.path, timeout=5)
                conn.execute("SELECT count(*) FROM jobs").fetchone()
                os._exit(0)
            finally:
                os._exit(1)
        children.append(pid)
        forked.set()

    helper = threading.Thread(target=helper_inside_sqlite)
    helper.start()
    assert inside.wait(5)
    forker = threading.Thread(target=fork)
    forker.start()
    try:
        assert not forked.wait(0.3), "the fork went ahead while a thread held the store lock"
    finally:
        leave.set()
    assert forked.wait(5), "the fork never went ahead once the lock was free"
    forker.join(5)
    helper.join(5)
    assert _wait_child(children[0], timeout=10) == 0
    # The parent's backend still works (its lock was given back after the fork).
    assert backend.stats() is not None
    backend.close()
