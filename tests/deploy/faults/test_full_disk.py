"""A full disk under a SQLite store (issue 11, defect 13).

The store's file lives on a small tmpfs the test fills mid-drain and frees again. SQLite
answers "database or disk is full" (at the COMMIT of a claim, a settle, a publish): the
transport takes it as a connection error naming the store. Workers keep running (they used
to exit with "Unrecoverable error") and resume when space returns; publishers get Celery's
``OperationalError`` naming the store file; nothing already stored is lost or corrupted
(``PRAGMA integrity_check``), and every acknowledged publish is completed once.
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Callable

import pytest

from .harness import Deployment, Publisher, check
from .servers import SmallDisk
from .test_worker_kills import publish_mix


def run_full_disk(deployment: Deployment, disk: SmallDisk, full_s: float, jobs: int) -> None:
    workers = [deployment.start_worker(concurrency=2), deployment.start_worker(concurrency=2)]
    publish_mix(deployment, jobs, seconds=0.3)
    deployment.wait_running(2)
    publisher = Publisher(deployment, every=0.05)
    publisher.start()
    disk.fill()
    time.sleep(full_s)
    disk.free()
    deployment.fault_ended = time.time()
    time.sleep(1.0)
    publisher.stop()
    for worker in workers:
        assert worker.proc.poll() is None, \
            f"a worker exited (code {worker.proc.returncode}): {worker.log()[-3000:]}"
        assert "Unrecoverable error" not in worker.log()
    report = deployment.finish(f"disk full for {full_s:.0f}s, lease {deployment.vt:.0f}s")
    assert report.publish_errors, "no publish ever met the full disk"
    assert set(report.publish_errors) == {"OperationalError"}, publisher.tracebacks
    store_file = str(disk.folder / "store.db")
    assert all(store_file in e and "disk is full" in e for e in deployment.errors), \
        deployment.errors[:3]
    with contextlib.closing(sqlite3.connect(store_file)) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    check(report, recovery_within=deployment.vt + 10)


def test_a_full_disk_under_a_sqlite_store(deploy: Callable[..., Deployment],
                                          small_disk: SmallDisk) -> None:
    deployment = deploy("full disk", "sqlite", vt=6.0,
                        sqlite_path=small_disk.folder / "store.db")
    run_full_disk(deployment, small_disk, full_s=3.0, jobs=40)


@pytest.mark.long
def test_a_full_disk_under_a_sqlite_store_long(deploy: Callable[..., Deployment],
                                               small_disk: SmallDisk) -> None:
    deployment = deploy("full disk-long", "sqlite", vt=30.0,
                        sqlite_path=small_disk.folder / "store.db")
    run_full_disk(deployment, small_disk, full_s=20.0, jobs=200)
