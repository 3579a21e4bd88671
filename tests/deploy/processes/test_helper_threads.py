"""Helper threads are real OS threads; the celery-plus command patches green pools first
(issue 12 defect 1, unit level; tests/deploy/e2e/test_dropin_green_pools.py runs real workers)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from celery_plus._early import is_the_command
from celery_plus.runtime.helper_threads import HelperThread, NativeEvent


@pytest.mark.parametrize(("argv0", "orig", "expected"), [
    ("/venv/bin/celery-plus", ["/venv/bin/python", "/venv/bin/celery-plus", "worker"], True),
    ("-m", ["python", "-m", "celery_plus.cli", "worker", "-P", "gevent"], True),
    ("-m", ["python", "-X", "dev", "-mcelery_plus.cli", "worker"], True),
    ("/venv/bin/celery", ["python", "/venv/bin/celery", "worker"], False),
    ("-m", ["python", "-m", "celery", "worker"], False),
    ("-c", ["python", "-c", "import celery_plus"], False),
    ("-m", ["python", "-m", "pytest", "-m", "celery_plus"], False),
])
def test_the_command_is_recognised(argv0: str, orig: list[str], expected: bool) -> None:
    assert is_the_command(argv0, orig) is expected


def test_native_event_wakes_a_waiting_thread() -> None:
    event = NativeEvent()
    assert event.wait(0.01) is False
    woke: list[bool] = []
    thread = threading.Thread(target=lambda: woke.append(event.wait(10)))
    thread.start()
    event.set()
    thread.join(5)
    assert woke == [True] and event.is_set() and event.wait() is True


GREEN = """
import sys
if sys.argv[1] == "gevent":
    from gevent import monkey; monkey.patch_all()
else:
    import eventlet; eventlet.monkey_patch()
import threading, time
from celery_plus.runtime.helper_threads import HelperThread, NativeEvent
stop, ticks = NativeEvent(), []
class Ticker(HelperThread):
    def run(self):
        while not stop.wait(0.05):
            ticks.append(threading.get_native_id())
Ticker(daemon=True).start()
deadline = time.monotonic() + 1.0
while time.monotonic() < deadline:  # CPU-bound: a greenlet would never get to run
    pass
stop.set()
print(len(ticks), len(set(ticks) - {threading.get_native_id()}))
"""


@pytest.mark.parametrize("library", ["gevent", "eventlet"])
def test_a_helper_thread_runs_beside_a_cpu_bound_greenlet(library: str) -> None:
    proc = subprocess.run([sys.executable, "-W", "ignore", "-c", GREEN, library],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    ticks, other_threads = map(int, proc.stdout.split())
    assert ticks >= 5 and other_threads == 1, proc.stdout


def test_without_patching_a_helper_thread_is_a_plain_thread() -> None:
    done = threading.Event()

    class Quick(HelperThread):
        def run(self) -> None:
            done.set()

    thread = Quick(daemon=True)
    thread.start()
    thread.join(5)
    assert done.is_set() and not thread.is_alive()
    time.sleep(0)
