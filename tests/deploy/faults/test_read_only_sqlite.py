"""A SQLite store whose file turns read-only mid-drain (issue 27).

The store's files (the database, its ``-wal`` and ``-shm``) lose their write permission for
10 s while two workers drain 60 jobs; meanwhile one worker is restarted (a deploy) and one
more is started. The workers started during the fault open the file read-only and SQLite
refuses their writes (``attempt to write a readonly database``): they wait and say so in one
WARNING line instead of exiting (every worker used to exit, and the jobs stayed stored until a
manual restart). Once the file is writable again they start, and every stored job runs once:
0 lost, no overlapping runs by the ledger.

What a permission change (or a read-only file system) cannot do is reach a connection that is
already open: POSIX checks permissions when a file is opened, and a file system holding a file
open for writing cannot be remounted read-only (``mount -o remount,ro`` answers "mount point is
busy", checked on a tmpfs here). So the worker that keeps running goes on writing through its
open connection; the fault bites every process that opens the store during it. Root ignores
file permissions, so as root the workers run without ``CAP_DAC_OVERRIDE`` (``setpriv``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.deploy.matrix import pools
from tests.support import wait_until

from .harness import Deployment, Worker, check
from .test_full_store import alive
from .test_worker_kills import publish_mix

REFUSED = "attempt to write a readonly database"


def without_root_permissions() -> list[str]:
    """The command prefix that makes file permissions bind the workers ([] unless root)."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("root ignores file permissions: setpriv (util-linux) is needed to run "
                    "the workers without CAP_DAC_OVERRIDE")
    caps = "-dac_override,-dac_read_search"
    wrap = [setpriv, f"--inh-caps={caps}", f"--bounding-set={caps}", "--"]
    probe = subprocess.run([*wrap, "true"], capture_output=True, text=True, check=False)
    if probe.returncode != 0:
        pytest.skip(f"root ignores file permissions, and setpriv cannot drop CAP_DAC_OVERRIDE "
                    f"here: {probe.stderr.strip()}")
    return wrap


def set_writable(store: Path, writable: bool) -> None:
    """The write permission of the store's files (those that exist)."""
    for path in (store, Path(f"{store}-wal"), Path(f"{store}-shm")):
        if path.exists():
            path.chmod(0o644 if writable else 0o444)


@pytest.fixture
def store_file(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "store.db"
    yield path
    set_writable(path, True)  # whatever the test did


def new_workers_refused(workers: list[Worker]) -> bool:
    return all(REFUSED in w.log() for w in workers)


def run_read_only_file(deployment: Deployment, store: Path, read_only_s: float,
                       jobs: int, pool: str = "prefork") -> None:
    deployment.wrap = without_root_permissions()
    kept = deployment.start_worker(pool=pool, concurrency=2)
    restarted = deployment.start_worker(pool=pool, concurrency=2)
    publish_mix(deployment, jobs, seconds=0.3)
    deployment.wait_running(2)
    set_writable(store, False)
    restarted.stop()  # a deploy while the file is read-only: SIGTERM, warm shutdown
    fresh = [deployment.start_worker(pool=pool, concurrency=2, wait=False) for _ in range(2)]
    wait_until(lambda: new_workers_refused(fresh), timeout=30,
               message="the workers started meanwhile meeting the read-only file")
    time.sleep(read_only_s)  # the fault's duration
    alive([kept, *fresh])
    assert not any(" ready." in w.log() for w in fresh), deployment.logs()
    set_writable(store, True)
    deployment.fault_ended = time.time()
    for worker in fresh:
        deployment.wait_ready(worker)
    publish_mix(deployment, 10, seconds=0.3, first=jobs)
    report = deployment.finish(f"store file read-only for {read_only_s:.0f}s, lease "
                               f"{deployment.vt:.0f}s, 2 workers started meanwhile")
    alive([kept, *fresh])
    assert not deployment.overlapping_runs(), deployment.overlapping_runs()
    warnings = [line for w in fresh for line in w.log().splitlines()
                if "WARNING" in line and REFUSED in line]
    assert warnings and all(str(store) in line for line in warnings), warnings
    check(report, recovery_within=deployment.vt + 10)


@pytest.mark.long
@pools("prefork", "threads")
def test_a_sqlite_store_file_read_only_mid_drain(deploy: Callable[..., Deployment],
                                                 store_file: Path, pool: str) -> None:
    """The issue's figure: writes refused for 10 s (under a 15 s lease)."""
    deployment = deploy(f"sqlite read-only {pool}", "sqlite", vt=15.0, sqlite_path=store_file)
    run_read_only_file(deployment, store_file, read_only_s=10.0, jobs=60, pool=pool)
