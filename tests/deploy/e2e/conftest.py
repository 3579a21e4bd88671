"""Fixtures for end-to-end tests: an isolated key prefix, real worker processes, polling.

Every test that uses ``client``, ``start_worker`` or ``view`` runs once per durable store
(``broker_kind``: ``redis`` = ``plus+redis://``, ``sqlite`` = a ``plus+sqlite:///`` file in
the test's tmp_path, ``postgres`` = ``plus+postgresql://`` on the test database with one
schema per test, :func:`tests.deploy.e2e.proj.pg_schema` of the prefix, dropped afterwards) and
asserts on store state through ``view`` (a :class:`~celery_plus.model.store.Backend` on
the same store). Task events stay in Redis under ``prefix`` on every store. Modules in
:data:`OWN_BROKER`, and modules overriding the ``broker_url`` fixture, choose their broker
themselves.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from celery_plus.model.options import StoreOptions
from celery_plus.model.store import Backend
from celery_plus.stores.postgres.backend import PostgresBackend
from celery_plus.stores.redis.backend import RedisBackend
from celery_plus.stores.sqlite.backend import SQLiteBackend
from tests.fast.conformance.stores import PG_URL
from tests.support import drop_pg_schema, wait_until

from . import proj

ROOT = Path(__file__).resolve().parents[3]
CELERY_PLUS = [sys.executable, "-m", "celery_plus.cli"]
PLAIN_CELERY = [sys.executable, "-m", "celery"]

#: The durable stores every end-to-end scenario runs on.
BROKERS = ("redis", "sqlite", "postgres")
#: Modules not run once per store: they choose their broker themselves, or (mixed
#: deployment, migrate-queue, the compact Redis layout) run on Redis only, the default store
#: of ``broker_url``/``view``.
OWN_BROKER = frozenset({"test_sqlite_chord", "test_demo", "test_coordination",
                        "test_mixed_deployment", "test_migrate_queue", "test_migrate_back",
                        "test_compact_layout",
                        "test_redis_cluster"})


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Run each test depending on ``broker_kind`` once per store (ids: redis, sqlite,
    postgres)."""
    module = metafunc.module.__name__.rpartition(".")[2]
    if "broker_kind" in metafunc.fixturenames and module not in OWN_BROKER:
        metafunc.parametrize("broker_kind", BROKERS, indirect=True, ids=BROKERS)



class Worker:
    """A real ``celery-plus worker`` process."""

    def __init__(self, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.proc = proc
        self.log_path = log
        self._terminated = False

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        """SIGKILL the worker and its pool children."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def terminate(self) -> None:
        """Ask for a warm shutdown (SIGTERM, once) without waiting for it."""
        if self.proc.poll() is None and not self._terminated:
            self._terminated = True
            self.proc.send_signal(signal.SIGTERM)

    def stop(self, timeout: float = 20) -> None:
        if self.proc.poll() is None:
            self.terminate()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def prefix() -> Iterator[str]:
    name = f"t{uuid.uuid4().hex[:10]}"
    yield name
    client = redis.Redis.from_url(proj.REDIS_URL)
    keys = list(client.scan_iter(f"{name}:*", count=1000))
    for i in range(0, len(keys), 500):
        client.delete(*keys[i:i + 500])
    client.close()


@pytest.fixture
def store(prefix: str) -> redis.Redis:
    return redis.Redis.from_url(proj.REDIS_URL, decode_responses=True)


@pytest.fixture
def broker_kind(request: pytest.FixtureRequest) -> str:
    """The durable store under test: "redis", "sqlite" or "postgres" (see
    ``pytest_generate_tests``)."""
    return str(getattr(request, "param", "redis"))


@pytest.fixture
def broker_url(request: pytest.FixtureRequest, broker_kind: str, tmp_path: Path,
               monkeypatch: pytest.MonkeyPatch, prefix: str) -> Iterator[str]:
    """The broker URL of ``broker_kind``; exported as PLUS_TEST_BROKER to the client app,
    workers and any CLI the test runs (only when the test is parametrized by the store).

    SQLite: a database file in the test's tmp_path. tmp_path is absolute, so the URL has
    four slashes: ``plus+sqlite:////tmp/.../broker.db``.

    PostgreSQL: the test database (``PLUS_TEST_PG``); the client app and workers use the
    schema ``proj.pg_schema(prefix)`` (their ``plus_pg_schema``), dropped when the test ends
    (after its workers stopped: they depend on this fixture).
    """
    if broker_kind == "sqlite":
        url = f"plus+sqlite:///{tmp_path / 'broker.db'}"
    elif broker_kind == "postgres":
        url = f"plus+{PG_URL}"
    else:
        url = f"plus+{proj.REDIS_URL}"
    callspec = getattr(request.node, "callspec", None)
    if callspec is not None and "broker_kind" in callspec.params:
        monkeypatch.setenv("PLUS_TEST_BROKER", url)
    yield url
    if broker_kind == "postgres":
        drop_pg_schema(PG_URL, proj.pg_schema(prefix))


@pytest.fixture
def view(broker_kind: str, broker_url: str, prefix: str) -> Iterator[Backend]:
    """A store backend on the test's store, for assertions on job records, holds, slots."""
    backend: Backend
    if broker_kind == "sqlite":
        backend = SQLiteBackend(broker_url.removeprefix("plus+"), StoreOptions(prefix=prefix))
    elif broker_kind == "postgres":
        backend = PostgresBackend(broker_url.removeprefix("plus+"),
                                  schema=proj.pg_schema(prefix))
    else:
        backend = RedisBackend(broker_url.removeprefix("plus+"), StoreOptions(prefix=prefix))
    yield backend
    backend.close()


@pytest.fixture
def client(prefix: str, broker_url: str) -> Iterator[Any]:
    app = proj.make_app(prefix)
    yield app
    app.close()


@pytest.fixture
def start_worker(prefix: str, tmp_path: Path, broker_url: str) -> Iterator[Callable[..., Worker]]:
    workers: list[Worker] = []

    def start(*args: str, pool: str = "solo", concurrency: int = 1,
              env: dict[str, str] | None = None, ready: bool = True,
              cli: str = "celery-plus", app: str = "tests.deploy.e2e.proj") -> Worker:
        log = tmp_path / f"worker-{len(workers)}.log"
        program = CELERY_PLUS if cli == "celery-plus" else PLAIN_CELERY
        cmd = [*program, "-A", app, "worker", f"--pool={pool}",
               f"--concurrency={concurrency}", "--loglevel=INFO", "--without-gossip",
               "--without-mingle", f"--hostname=w{len(workers)}-{prefix}@%h", *args]
        full_env = {**os.environ, "PLUS_TEST_PREFIX": prefix, **(env or {})}
        with open(log, "wb") as out:
            proc = subprocess.Popen(cmd, cwd=ROOT, env=full_env, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        worker = Worker(proc, log)
        workers.append(worker)
        if ready:
            try:
                wait_until(lambda: " ready." in worker.log() or proc.poll() is not None,
                           timeout=30, message="worker ready")
            except AssertionError as exc:
                raise AssertionError(f"{exc}; its log:\n{worker.log()}") from None
            assert proc.poll() is None, worker.log()
        return worker

    yield start
    # SIGKILL, not a warm shutdown: the test's assertions are done, and a prefork pool's warm
    # shutdown takes about 2 s (as plain Celery's does). Tests of shutdown call stop() themselves.
    for worker in workers:
        worker.kill()
