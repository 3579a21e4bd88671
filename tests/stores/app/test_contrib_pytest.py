"""Defect 10 of issue 12: ``celery_plus.contrib.pytest`` and eager mode.

Runs inner pytest sessions (subprocesses, so the plugin is loaded as a user loads it) on
test files a project would write: the fixtures give a celery-plus app and an in-thread
worker on a fresh in-process store (``plus+memory://``: no server, no file), or on
``CELERY_PLUS_TEST_BROKER``; eager mode applies the extension options as a worker would and
``EagerResult.deduplicated`` exists. Uniqueness, a concurrency limit and a dead letter work
through the fixtures on every store, the in-process one included (``EXTENSION_TESTS``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fast.conformance.stores import PG_URL, REDIS_URL

ROOT = Path(__file__).resolve().parents[3]

USER_TESTS = '''
import time
import pytest
from celery_plus import Celery
from celery_plus.exceptions import DuplicateTask


def test_the_app_is_celery_plus_on_a_durable_store(celery_app):
    assert isinstance(celery_app, Celery)
    assert celery_app.conf.broker_url.startswith(EXPECTED_BROKER)
    assert celery_app.conf.result_backend == "cache+memory://"  # as Celery's fixtures


def test_a_worker_runs_tasks_and_duplicates_coalesce(celery_app, celery_worker):
    @celery_app.task(name="user.slow", unique=True)
    def slow(key):
        time.sleep(0.5)
        return key

    celery_worker.reload()  # register the task in the running worker
    first = slow.delay("k")
    again = slow.delay("k")
    assert first.deduplicated is False and again.deduplicated is True
    assert again.id == first.id and first.get(timeout=20) == "k"


@pytest.mark.celery(task_always_eager=True)
def test_eager_mode_applies_the_options(celery_app):
    @celery_app.task(name="user.ttl", unique_by=["key"], unique_ttl=60)
    def ttl(key, n=0):
        return n

    @celery_app.task(name="user.raises", unique_by=["key"], unique_ttl=60,
                     unique_on_duplicate="raise")
    def raises(key):
        return key

    first, again, other = ttl.delay("a", 1), ttl.delay("a", 2), ttl.delay("b", 3)
    assert (first.get(), first.deduplicated) == (1, False)
    assert (again.get(), again.deduplicated, again.id) == (1, True, first.id)
    assert (other.get(), other.deduplicated) == (3, False)
    raises.delay("x")
    with pytest.raises(DuplicateTask):
        raises.delay("x")
    with pytest.raises(TypeError, match="user.ttl"):
        ttl.delay(object())
    with pytest.raises(TypeError, match="arguments do not match"):
        ttl.delay()


@pytest.mark.celery(task_always_eager=True)
def test_eager_running_window_coalesces_a_task_calling_itself(celery_app):
    @celery_app.task(name="user.reentrant", bind=True, unique=True)
    def reentrant(self, key):
        inner = reentrant.delay(key)
        return [inner.deduplicated, inner.id == self.request.id]

    outer = reentrant.delay("k")
    assert outer.get() == [True, True]
    assert reentrant.delay("k").deduplicated is False  # released when it returned


def test_session_fixtures(celery_session_app, celery_session_worker):
    assert isinstance(celery_session_app, Celery)
    assert celery_session_app.tasks["celery.ping"].delay().get(timeout=20) == "pong"
'''


#: A project's tests of the extensions, on a worker with four threads.
EXTENSION_TESTS = '''
import threading
import time

import pytest
from celery_plus import admin


@pytest.fixture
def celery_worker_pool():
    return "threads"


@pytest.fixture
def celery_worker_parameters():
    return {"concurrency": 4}


def test_the_store_is_the_expected_one(celery_app):
    assert celery_app.conf.broker_url.startswith(EXPECTED_BROKER)


def test_duplicates_of_a_waiting_task_coalesce(celery_app, celery_worker):
    @celery_app.task(name="user.invoice", unique_by=["customer"], unique_window="pending")
    def invoice(customer, amount):
        return amount

    celery_worker.reload()
    with celery_app.publish_batch():  # both published before the worker can claim either
        first = invoice.delay(42, 10)
        again = invoice.delay(42, 20)
    assert first.deduplicated is False and again.deduplicated is True
    assert again.id == first.id and first.get(timeout=20) == 10


def test_a_concurrency_limit_holds_on_a_worker_with_four_threads(celery_app, celery_worker):
    lock, running, peak = threading.Lock(), set(), []

    @celery_app.task(name="user.report", concurrency=1, concurrency_key="customer")
    def report(customer, n):
        with lock:
            running.add(n)
            peak.append(len(running))
        time.sleep(0.2)
        with lock:
            running.discard(n)
        return n

    celery_worker.reload()
    results = [report.delay("acme", n) for n in range(4)]
    assert [r.get(timeout=20) for r in results] == [0, 1, 2, 3]
    assert max(peak) == 1, peak


def test_a_failed_task_is_a_dead_letter(celery_app, celery_worker):
    @celery_app.task(name="user.mail")
    def mail(customer):
        raise ConnectionError("SMTP server unreachable")

    celery_worker.reload()
    result = mail.delay(42)
    with pytest.raises(ConnectionError):
        result.get(timeout=20)
    deadline = time.monotonic() + 10
    while not admin.jobs(celery_app, "failed").items and time.monotonic() < deadline:
        time.sleep(0.05)
    [row] = admin.jobs(celery_app, "failed").items
    assert (row.id, row.exc_type) == (result.id, "ConnectionError")
    assert "SMTP server unreachable" in row.exc_message
'''


def _run(tmp_path: Path, broker: str, expected: str, tests: str = USER_TESTS,
         ) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_user.py").write_text(f"EXPECTED_BROKER = {expected!r}\n" + tests)
    env = {**os.environ, "CELERY_PLUS_TEST_BROKER": broker}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "celery_plus.contrib.pytest",
         "-p", "no:cacheprovider", "-p", "no:xdist", "--rootdir", str(tmp_path),
         str(tmp_path / "test_user.py")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)


#: (CELERY_PLUS_TEST_BROKER, the broker URL the app gets starts with); "{tmp}": the test's
#: folder.
STORES = {"in-process": ("", "plus+memory://t"),
          "sqlite": ("plus+sqlite:///{tmp}/broker.db", "plus+sqlite:///"),
          "redis": (f"plus+{REDIS_URL}", f"plus+{REDIS_URL}"),
          "postgres": (f"plus+{PG_URL}", f"plus+{PG_URL}")}


@pytest.mark.parametrize("store", list(STORES))
def test_a_projects_tests_run_on_the_fixtures(tmp_path: Path, store: str) -> None:
    broker, expected = STORES[store]
    proc = _run(tmp_path, broker.format(tmp=tmp_path), expected)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "5 passed" in proc.stdout, proc.stdout


@pytest.mark.parametrize("store", list(STORES))
def test_uniqueness_a_concurrency_limit_and_a_dead_letter_through_the_fixtures(
        tmp_path: Path, store: str) -> None:
    """The default store needs no server: no Redis, no PostgreSQL, no file."""
    broker, expected = STORES[store]
    proc = _run(tmp_path, broker.format(tmp=tmp_path), expected, EXTENSION_TESTS)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "4 passed" in proc.stdout, proc.stdout
    if not broker:
        assert not list(tmp_path.glob("**/*.db")), "the in-process store wrote a file"


ORDER_TEST = '''
from celery_plus import Celery


def test_the_app_is_celery_plus(celery_app):
    assert isinstance(celery_app, Celery)
'''


@pytest.mark.parametrize("plugins, conftest, passes", [
    (["celery.contrib.pytest", "celery_plus.contrib.pytest"], False, True),
    (["celery_plus.contrib.pytest", "celery.contrib.pytest"], False, False),
    (["celery_plus.contrib.pytest", "celery.contrib.pytest"], True, False),
], ids=["celery-then-plus", "plus-then-celery", "plus-then-celery-in-conftest"])
def test_celerys_plugin_loaded_after_ours_stops_the_session(
        tmp_path: Path, plugins: list[str], conftest: bool, passes: bool) -> None:
    """Both plugins loaded (``-p``, or ``pytest_plugins`` in the conftest): the one
    registered last provides ``celery_app``. Celery's last would give every test a plain
    Celery app, silently; the session stops instead."""
    (tmp_path / "test_order.py").write_text(ORDER_TEST)
    loads = [arg for name in plugins for arg in ("-p", name)]
    if conftest:
        (tmp_path / "conftest.py").write_text(f"pytest_plugins = {tuple(plugins)!r}\n")
        loads = []
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", *loads, "-p", "no:cacheprovider",
         "-p", "no:xdist", "--rootdir", str(tmp_path), str(tmp_path / "test_order.py")],
        cwd=tmp_path, env={**os.environ, "CELERY_PLUS_TEST_BROKER": ""},
        capture_output=True, text=True, timeout=120)
    output = proc.stdout + proc.stderr
    if passes:
        assert proc.returncode == 0 and "1 passed" in proc.stdout, output
    else:
        assert proc.returncode == 4, output  # pytest's usage error
        assert "load celery_plus.contrib.pytest instead of celery.contrib.pytest" in output
