"""``celery-plus demo`` end to end: real workers on a temporary embedded SQLite store.

Acceptance lines covered: the demo runs without ``-A``, exits 0 in under a minute, and its
summary reports what the workload implies — uniqueness (12 deliveries → 3 jobs, 9 coalesced,
6 while pending and 3 while running), concurrency (max 1 running per customer, customers in
parallel), retries (success on attempt 3), dead letters (the poison job's ValueError) and
recovery (both exports of the SIGKILLed worker completed by the other, delivered twice);
no worker process and no temporary file is left, after a normal run and after Ctrl-C.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from celery_plus.demo import runner

from .conftest import ROOT, wait_until

DEMO = [sys.executable, "-m", "celery_plus.cli", "demo"]


def demo_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("CELERY_BROKER_URL", "CELERY_RESULT_BACKEND")}
    env["PYTHONUNBUFFERED"] = "1"
    return env


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its new parent) is not a running worker.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def worker_pids(output: str) -> list[int]:
    return [int(p) for p in re.findall(r"worker [AB] started \(pid (\d+)", output)]


def store_dir(output: str) -> Path:
    match = re.search(r"embedded store: (\S+)/\.celery-plus/", output)
    assert match, output
    return Path(match.group(1))


def summary_line(output: str, name: str) -> str:
    match = re.search(rf"^  {re.escape(name)}: (.*)$", output, re.MULTILINE)
    assert match, f"no {name!r} line in the summary:\n{output}"
    return match.group(1)


def test_demo_shows_every_extension_and_cleans_up(tmp_path: Path) -> None:
    started = time.monotonic()
    proc = subprocess.run(DEMO, cwd=tmp_path, env=demo_env(), capture_output=True, text=True,
                          timeout=120)
    elapsed = time.monotonic() - started
    output = proc.stdout
    assert proc.returncode == 0, output + proc.stderr
    assert elapsed < 60, f"the demo took {elapsed:.1f}s"

    # What the workload implies.
    events = len(runner.WEBHOOK_EVENTS)
    deliveries = events * (runner.PENDING_DELIVERIES + 1)
    pending_dups = events * (runner.PENDING_DELIVERIES - 1)
    uniqueness = re.fullmatch(
        r"(\d+) deliveries → (\d+) jobs \((\d+) coalesced: (\d+) while pending, "
        r"(\d+) while running\); (\d+) handler runs", summary_line(output, "uniqueness"))
    assert uniqueness, output
    assert [int(g) for g in uniqueness.groups()] == [
        deliveries, events, deliveries - events, pending_dups, events, events]

    concurrency = re.fullmatch(
        r"(\d+) reports, max (\d+) running per customer, (\d+) customers in parallel",
        summary_line(output, "concurrency"))
    assert concurrency, output
    reports, per_customer, parallel = (int(g) for g in concurrency.groups())
    assert reports == len(runner.CUSTOMERS) * len(runner.MONTHS)
    assert per_customer == 1
    assert 2 <= parallel <= len(runner.CUSTOMERS)

    assert summary_line(output, "retries").startswith(
        "flaky job succeeded on attempt 3 (attempts 1, 2, 3;")

    dead = summary_line(output, "dead letters")
    assert dead.startswith(f"1 (ValueError: order {runner.POISON_ORDER}: malformed payload"), dead

    parts = len(runner.EXPORT_PARTS)
    assert summary_line(output, "recovery") == (
        f"{parts} jobs recovered from the killed worker and completed "
        f"(deliveries per job: {', '.join(['2'] * parts)})")

    # Live progress: a status line per second with counts by state.
    assert len(re.findall(r"^\s*\d+\.\ds  \[A:up B:killed\] enqueued \d+ · blocked \d+",
                          output, re.MULTILINE)) >= 1, output

    # Nothing left behind: both workers are gone and the temporary store was removed.
    pids = worker_pids(output)
    assert len(pids) == 2, output
    assert not [pid for pid in pids if alive(pid)]
    assert not store_dir(output).exists()
    assert not (tmp_path / ".celery-plus").exists()  # the caller's directory is untouched


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_demo_stops_its_workers_and_removes_its_files(
        tmp_path: Path, sig: signal.Signals) -> None:
    log = tmp_path / "demo.log"
    with open(log, "w") as sink:
        # A shell's background job inherits SIGINT ignored, and Python keeps it ignored:
        # give the demo the disposition a terminal's foreground process has.
        proc = subprocess.Popen(DEMO, cwd=ROOT, env=demo_env(), stdout=sink,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=_default_sigint)
    try:
        wait_until(lambda: "worker A started" in log.read_text() or proc.poll() is not None,
                   timeout=40, message="worker A started")
        assert proc.poll() is None, log.read_text()
        # Ctrl-C reaches the terminal's foreground process group: the demo, not its workers
        # (they run in sessions of their own), so the demo must stop them itself.
        os.killpg(proc.pid, sig)
        assert proc.wait(timeout=30) == 130
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    output = log.read_text()
    assert "interrupted: stopping the workers" in output
    pids = worker_pids(output)
    assert len(pids) == 2, output
    assert not [pid for pid in pids if alive(pid)]
    assert not store_dir(output).exists()
