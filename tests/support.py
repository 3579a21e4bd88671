"""Helpers shared by every test layer."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # not imported at run time: worker and fault-run processes import this module
    from multiprocessing.context import ForkServerContext

    import pytest


def wait_until(predicate: Callable[[], Any], timeout: float = 30.0, interval: float = 0.05,
               message: str = "condition") -> Any:
    """Poll ``predicate`` until it returns a truthy value; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


def celery_plus(capsys: pytest.CaptureFixture[str], *args: str) -> subprocess.CompletedProcess[str]:
    """``celery-plus ARGS`` through the console script's function (``celery_plus.cli.main``) in
    this process: its exit status, stdout and stderr. A process per call costs a Python start
    and Celery's imports (0.7-0.8 s at load average 2.5-3; CI, at -n 6 on 2 cores: 65 s for a
    test of five); the script itself runs as a process in ``tests/deploy/processes/``
    (``test_cli.py``, ``test_install.py``)."""
    import pytest

    from celery_plus.cli import main

    capsys.readouterr()
    with pytest.raises(SystemExit) as exited:
        main(list(args))
    out, err = capsys.readouterr()
    code = exited.value.code  # as the interpreter maps sys.exit()'s argument
    status = 0 if code is None else code if isinstance(code, int) else 1
    return subprocess.CompletedProcess(["celery-plus", *args], status, out, err)


def drop_pg_schema(url: str, schema: str) -> None:
    """Drop a test's PostgreSQL schema. A store session of the test's app may still be at
    work in it for a moment after the app closed (its helper threads stop on their next
    turn), and PostgreSQL may pick the drop as the victim of the lock cycle: it is tried
    again."""
    import psycopg

    for attempt in range(5):
        try:
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
            return
        except psycopg.errors.DeadlockDetected:
            if attempt == 4:
                raise
            time.sleep(0.2)


def set_pg_read_only(url: str, on: bool) -> None:
    """``default_transaction_read_only`` of ``url``'s database, for every session: the
    sessions open now are ended, so the store's pool reconnects under the new setting."""
    import psycopg

    base, name = url.rsplit("/", 1)
    with psycopg.connect(f"{base}/postgres", autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = '
                     f'{"on" if on else "off"}')
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                     "WHERE datname = %s AND pid <> pg_backend_pid()", (name,))


def in_forked_child(target: Callable[..., Any], *args: Any, timeout: float = 60.0) -> Any:
    """Run ``target(*args)`` in a child made by a bare ``os.fork()``; its return value.

    Not ``multiprocessing``'s fork: that runs kombu's after-fork clean-up of every kombu
    connection an earlier test left in this process, which can block on a socket forever.
    An exception in the child is raised here as an ``AssertionError`` with its traceback.
    """
    import os
    import pickle
    import select
    import traceback

    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(read_end)
        try:
            payload = pickle.dumps(("ok", target(*args)))
        except BaseException:
            payload = pickle.dumps(("error", traceback.format_exc()))
        with os.fdopen(write_end, "wb") as out:
            out.write(payload)
        os._exit(0)
    os.close(write_end)
    chunks: list[bytes] = []
    deadline = time.monotonic() + timeout
    with os.fdopen(read_end, "rb") as inp:
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([inp], [], [], remaining)[0]:
                os.kill(pid, 9)
                os.waitpid(pid, 0)
                raise AssertionError(f"forked child did not finish within {timeout}s")
            chunk = os.read(inp.fileno(), 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, f"forked child exited with {status}"
    kind, value = pickle.loads(b"".join(chunks))
    if kind == "error":
        raise AssertionError(f"forked child failed:\n{value}")
    return value


def keep_tests_using(namespace: dict[str, Any], *fixtures: str) -> None:
    """Drop from a module that re-runs another tier's cases on other stores (``from … import
    *``) every test that takes none of ``fixtures``: only the cases that depend on the store
    run twice, once per tier; the others run where they are written."""
    import inspect

    for name, value in list(namespace.items()):
        if (name.startswith("test_") and callable(value)
                and not set(inspect.signature(value).parameters) & set(fixtures)):
            del namespace[name]


#: What the test processes' fork server imports once, so that each process forked from it
#: does not (a spawned process imports them itself: about a second of CPU each, and a test
#: of 20 racing processes took 21 s at CI's load).
PROCESS_PRELOAD = ["pytest", "psycopg", "redis", "celery", "celery_plus",
                   "celery_plus.stores.postgres.backend", "celery_plus.stores.sqlite.backend",
                   "tests.support"]


def processes() -> ForkServerContext:
    """The ``multiprocessing`` context of tests that race real processes: each starts clean
    (forked from a server that holds no connection, thread or test state, as with "spawn"),
    from modules imported once."""
    import multiprocessing

    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PROCESS_PRELOAD)
    return context

