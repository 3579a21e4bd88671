"""Stopping the runs of lost leases (``runtime/worker_state.py``) on a green pool."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import textwrap
import weakref
from types import SimpleNamespace
from typing import Any

import pytest

from celery_plus.runtime import process_tree, worker_state


def test_a_green_pools_task_is_logged_not_signalled(monkeypatch: pytest.MonkeyPatch,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    # Under gevent (and eventlet) Celery's request.worker_pid is the id of the task's
    # greenlet, not a process: os.kill of it raised OverflowError in the lease keeper's
    # heartbeat (or could signal an unrelated process).
    request = SimpleNamespace(message=SimpleNamespace(delivery_tag="2:job"), acknowledged=False,
                              time_start=1.0, worker_pid=140657177836768, name="proj.t",
                              id="job")
    killed: list[Any] = []
    # A logger of the test's own: an in-process Celery worker of an earlier test in this
    # process may have reconfigured (or disabled) the package's loggers.
    monkeypatch.setattr(worker_state, "logger", logging.getLogger("tests.worker_state"))
    caplog.set_level(logging.WARNING, logger="tests.worker_state")
    monkeypatch.setattr(worker_state, "_in_worker", True)
    monkeypatch.setattr(worker_state, "_active_requests", lambda: [request])
    monkeypatch.setattr(worker_state, "green_patched", lambda: True, raising=False)
    monkeypatch.setattr(os, "kill", lambda *args: killed.append(args))
    worker_state.stop_stale_runs({"2:job"})
    assert killed == []
    assert "cannot be stopped from outside" in caplog.text



class _Request:
    """A stand-in for Celery's request (weakly referenced, as in its ``active_requests``)."""


class _ChangingWeakSet(weakref.WeakSet):  # type: ignore[type-arg]
    """A WeakSet whose every iteration meets another thread's change (the race, made sure)."""

    def __iter__(self):  # type: ignore[no-untyped-def]
        raise RuntimeError("Set changed size during iteration")


def test_the_scan_of_running_requests_never_comes_back_empty_while_the_set_changes(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # An empty scan tells the lease watch that no run goes on (its guard would then let a
    # run outlive its lease). Iterating Celery's WeakSet while pool threads add and discard
    # requests raises "changed size"; ten such failures in a row used to give an empty scan.
    from celery.worker import state

    steady = _Request()
    changing = _ChangingWeakSet()
    changing.add(steady)
    monkeypatch.setattr(state, "active_requests", changing)
    assert worker_state._active_requests() == [steady]


#: A "pool process" with a task's child (``sleep``), whose pid it prints; SIGTERM exits 7.
POOL_PROCESS = textwrap.dedent("""
    import os, signal, subprocess, time
    signal.signal(signal.SIGTERM, lambda *_: os._exit(7))
    print(subprocess.Popen(["sleep", "60"]).pid, flush=True)
    time.sleep(60)
""")


@pytest.mark.skipif(not process_tree.supported(), reason="needs Linux's /proc")
@pytest.mark.parametrize("why", ["lost", "overdue"])
def test_a_pool_process_stopped_for_its_lease_takes_its_tasks_child_with_it(
        monkeypatch: pytest.MonkeyPatch, why: str) -> None:
    """Issue #27, in a real pool-like process: a lost lease's SIGTERM (Celery's terminate)
    and an overdue lease's SIGKILL both kill the ``sleep`` the task started first; the pipe
    the sleep inherited closes once it is dead (before, it ran on)."""
    proc = subprocess.Popen([sys.executable, "-c", POOL_PROCESS], stdout=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        assert proc.stdout is not None
        proc.stdout.readline()
        request = SimpleNamespace(message=SimpleNamespace(delivery_tag="2:job"),
                                  acknowledged=False, time_start=1.0, worker_pid=proc.pid,
                                  name="proj.t", id="job")
        monkeypatch.setattr(worker_state, "logger", logging.getLogger("tests.worker_state"))
        monkeypatch.setattr(worker_state, "_in_worker", True)
        monkeypatch.setattr(worker_state, "_active_requests", lambda: [request])
        if why == "lost":
            worker_state.stop_stale_runs({"2:job"})
        else:
            worker_state.stop_overdue_runs({"2:job": 5.0}, worker_state.running_tags(), 6.0,
                                           set())
        proc.communicate(timeout=20)  # until the sleep, holding the pipe too, is gone
        assert proc.returncode == (7 if why == "lost" else -signal.SIGKILL)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
