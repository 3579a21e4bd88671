"""Issue #27: a task holding the GIL cannot keep a run past its lease. The guard process
(``runtime/deadline_guard.py``) kills a worker whose deadline passed while its own threads
are starved, and leaves alone one whose deadline keeps moving."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time

from celery_plus.runtime import deadline_guard

#: A "worker": starts its guard, sets a deadline ``DEADLINE_S`` from now, then holds the GIL
#: in one regular expression call far longer than that.
WORKER = textwrap.dedent("""
    import re, sys
    from celery_plus.runtime import deadline_guard
    slot = deadline_guard.GuardSlot()
    deadline_guard.start(slot)
    slot.set(deadline_guard.clock() + float(sys.argv[1]))
    print("holding", flush=True)
    re.match(r"(a+)+$", "a" * 40 + "b")  # catastrophic backtracking: minutes in C
    print("never", flush=True)
""")

KEEPS_RENEWING = textwrap.dedent("""
    import sys, time
    from celery_plus.runtime import deadline_guard
    slot = deadline_guard.GuardSlot()
    deadline_guard.start(slot)
    end = time.monotonic() + 1.5
    while time.monotonic() < end:
        slot.set(deadline_guard.clock() + 0.3)   # the watch renews: always ahead
        time.sleep(0.05)
    slot.set(float("inf"))                       # no run going on
    time.sleep(0.6)
    print("alive", flush=True)
""")


def test_a_worker_holding_the_gil_past_its_deadline_is_killed_by_its_guard() -> None:
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", WORKER, "0.5"], capture_output=True,
                          text=True, timeout=30)
    took = time.monotonic() - started
    assert proc.returncode == -9, (proc.returncode, proc.stderr)
    assert "holding" in proc.stdout and "never" not in proc.stdout
    assert "CRITICAL/LeaseGuard" in proc.stderr and "killing it (SIGKILL)" in proc.stderr
    assert took < 10, took


def test_a_worker_started_with_its_standard_input_closed_is_guarded_too() -> None:
    """The slot's descriptor would be 0 there, which the guard's own standard input (set as
    it starts) took over: the guard failed and the worker ran unguarded (review)."""
    proc = subprocess.run([sys.executable, "-c", WORKER, "0.5"], capture_output=True,
                          text=True, timeout=30, preexec_fn=lambda: os.close(0))
    assert proc.returncode == -9, (proc.returncode, proc.stderr)
    assert "CRITICAL/LeaseGuard" in proc.stderr


def test_a_worker_whose_deadline_moves_on_is_left_alone() -> None:
    proc = subprocess.run([sys.executable, "-c", KEEPS_RENEWING], capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    assert "alive" in proc.stdout and "LeaseGuard" not in proc.stderr


def test_the_guard_ends_with_its_worker() -> None:
    script = textwrap.dedent("""
        from celery_plus.runtime import deadline_guard
        slot = deadline_guard.GuardSlot()
        print(deadline_guard.start(slot).pid, flush=True)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=30)
    guard_pid = int(proc.stdout.split()[0])
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{guard_pid}/status") as status:
                if "State:\tZ" in status.read():
                    break
        except FileNotFoundError:
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"guard {guard_pid} outlived its worker")


def test_the_processes_a_killed_worker_started_die_with_it() -> None:
    """A task's ``subprocess`` (here a ``sleep`` started before the GIL is held) dies with
    the worker its guard kills: the pipe the sleep inherited closes (before, it ran on)."""
    script = WORKER.replace(
        'print("holding", flush=True)',
        'import subprocess; subprocess.Popen(["sleep", "60"]); print("holding", flush=True)')
    proc = subprocess.Popen([sys.executable, "-c", script, "0.5"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=20)  # every holder of the pipes gone: the sleep too
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
    assert proc.returncode == -9, err
    assert "holding" in out and "killing it (SIGKILL)" in err
    assert "WARNING/LeaseGuard] celery-plus: killed 1 process(es)" in err, err


def test_the_slot_leaves_no_file_behind() -> None:
    """The slot's file is unlinked at once (the guard inherits its descriptor): a worker
    killed with its guard (``kill -9`` of the group) used to leave one in ``/dev/shm``."""
    slot = deadline_guard.GuardSlot()
    try:
        assert os.readlink(f"/proc/self/fd/{slot.fd}").endswith(" (deleted)")
        slot.set(12.5)
        guards_view = deadline_guard.GuardSlot(os.dup(slot.fd))
        assert guards_view.get() == 12.5
        guards_view.close()
    finally:
        slot.close()
