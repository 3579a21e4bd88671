"""pytest fixtures for celery-plus apps: ``celery.contrib.pytest``'s, with a celery-plus app.

Enable them instead of Celery's (same names and shapes). With both loaded, whichever
registers last provides the fixtures; so if Celery's registers after this one (``-p
celery_plus.contrib.pytest -p celery.contrib.pytest``), the session stops with a usage error
rather than run every test on a plain Celery app::

    # conftest.py
    pytest_plugins = ("celery_plus.contrib.pytest",)

``celery_app`` is a ``celery_plus.Celery`` (so extensions work: dedupe, concurrency slots,
dead letters) on a fresh in-process store (``plus+memory://<name>``, one per app: no server,
no file), or on the store named by ``celery_plus_broker_url`` — override that fixture, or set
``CELERY_PLUS_TEST_BROKER`` (e.g. ``plus+redis://localhost:6379/0``, or
``plus+sqlite:///...`` for a file); each app then gets a key prefix / PostgreSQL schema of
its own. ``celery_worker`` runs a worker in a thread of the test process (Celery's
``celery.contrib.testing.worker.start_worker``, solo pool, or ``celery_worker_pool``'s:
``threads`` too; an in-process store refuses ``prefork``, whose processes could not share
it) on that app. The other fixtures are Celery's: ``celery_config``, ``celery_parameters``,
``celery_includes``, ``celery_worker_pool``, ``celery_worker_parameters``,
``celery_enable_logging``, ``use_celery_app_trap``, ``celery_class_tasks``,
``celery_session_app``, ``celery_session_worker``, ``depends_on_current_app``, and the
``@pytest.mark.celery(...)`` marker. Results go to ``cache+memory://`` as with Celery's
fixtures (the worker is in-process).
"""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from celery.contrib import pytest as celery_fixtures
from celery.contrib.testing.app import DEFAULT_TEST_CONFIG, UnitLogging, setup_default_app

from celery_plus.app import Celery

# Celery's fixtures that need no change (the app and worker fixtures below replace its own).
celery_class_tasks = celery_fixtures.celery_class_tasks
celery_config = celery_fixtures.celery_config
celery_enable_logging = celery_fixtures.celery_enable_logging
celery_includes = celery_fixtures.celery_includes
celery_parameters = celery_fixtures.celery_parameters
celery_worker_parameters = celery_fixtures.celery_worker_parameters
celery_worker_pool = celery_fixtures.celery_worker_pool
depends_on_current_app = celery_fixtures.depends_on_current_app
use_celery_app_trap = celery_fixtures.use_celery_app_trap


def pytest_configure(config: pytest.Config) -> None:
    """Celery's marker; and refuse a session where Celery's plugin registered after this one
    (its ``celery_app`` would win: a plain Celery app, no extension at work)."""
    celery_fixtures.pytest_configure(config)
    order = [plugin for _, plugin in config.pluginmanager.list_name_plugin()]
    ours = sys.modules[__name__]
    if (ours in order and celery_fixtures in order
            and order.index(celery_fixtures) > order.index(ours)):
        raise pytest.UsageError(
            "celery.contrib.pytest is registered after celery_plus.contrib.pytest, so its "
            "fixtures win and celery_app would be a plain Celery app: load "
            "celery_plus.contrib.pytest instead of celery.contrib.pytest (or after it)")


NO_WORKER = os.environ.get("NO_WORKER")
BROKER_ENV = "CELERY_PLUS_TEST_BROKER"


def isolation(url: str) -> dict[str, Any]:
    """Settings that give an app its own part of a shared store (key prefix, schema)."""
    name = f"t{uuid.uuid4().hex[:12]}"
    return {"plus_key_prefix": name, "plus_pg_schema": name} if url else {}


def drop_isolated(app: Celery) -> None:
    """Remove what an app with :func:`isolation` settings left in a shared store."""
    inner = str(app.conf.broker_url).removeprefix("plus+")
    scheme = inner.partition("://")[0]
    if scheme in ("redis", "rediss", "sentinel", "redis+cluster", "rediss+cluster"):
        with app.connection_for_write() as conn:
            client = conn.default_channel.backend.client  # a cluster's: scans every primary
            keys = list(client.scan_iter(f"{app.conf.plus_key_prefix}:*", count=1000))
            for i in range(0, len(keys), 500):
                client.delete(*keys[i:i + 500])
    elif scheme in ("postgresql", "postgres"):
        import psycopg

        from celery_plus.stores.postgres.migrations import quoted

        with psycopg.connect(inner, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA IF EXISTS {quoted(app.conf.plus_pg_schema)} CASCADE")


def in_process_url() -> str:
    """A new in-process store of its own (``plus+memory://<name>``)."""
    return f"plus+memory://t{uuid.uuid4().hex[:12]}"


def forget_in_process(url: str) -> None:
    """Drop the in-process store ``url`` names, if it is one (its jobs, holds, slots)."""
    if url.startswith("plus+memory:"):
        from celery_plus.stores.memory.state import forget_named

        forget_named(url.partition("://")[2].strip("/"))


@contextmanager
def _create_app(broker_url: str, store_dir: Path, enable_logging: bool = False,
                use_trap: bool = False, parameters: Mapping[str, Any] | None = None,
                **config: Any) -> Iterator[Celery]:
    """A celery-plus app configured like Celery's test app, on ``broker_url`` (or a new
    in-process store). ``store_dir``: the test's folder (unused by the in-process store)."""
    from celery.contrib.testing import tasks  # noqa: F401  (celery.ping, for the worker)

    url = broker_url or in_process_url()
    isolated = isolation(broker_url) if not broker_url.startswith("plus+memory:") else {}
    settings = {**DEFAULT_TEST_CONFIG, "broker_url": url, **isolated, **config}
    app = Celery("celery.tests", set_as_current=False,
                 log=None if enable_logging else UnitLogging, **dict(parameters or {}))
    app.conf.update(settings)
    with setup_default_app(app, use_trap=use_trap):
        try:
            yield app
        finally:
            if isolated:
                drop_isolated(app)
            app.close()
            if not broker_url:
                forget_in_process(url)


def _config(request: pytest.FixtureRequest, celery_config: Mapping[str, Any]) -> dict[str, Any]:
    mark = request.node.get_closest_marker("celery")
    return dict(celery_config, **(mark.kwargs if mark else {}))


@pytest.fixture(scope="session")
def celery_plus_broker_url() -> str:
    """The store the apps use: ``$CELERY_PLUS_TEST_BROKER``, or "" for a fresh in-process
    store per app (``plus+memory://``). Override to point the fixtures at a server."""
    return os.environ.get(BROKER_ENV, "")


@pytest.fixture
def celery_app(request: pytest.FixtureRequest, tmp_path: Path, celery_plus_broker_url: str,
               celery_config: Mapping[str, Any], celery_parameters: Mapping[str, Any],
               celery_enable_logging: bool, use_celery_app_trap: bool) -> Iterator[Celery]:
    """A ``celery_plus.Celery`` app for the test (Celery's ``celery_app``, celery-plus)."""
    with _create_app(celery_plus_broker_url, tmp_path, celery_enable_logging,
                     use_celery_app_trap, celery_parameters,
                     **_config(request, celery_config)) as app:
        yield app


@contextmanager
def _worker(app: Celery, includes: Sequence[str], pool: Any, parameters: Mapping[str, Any],
            class_tasks: Sequence[Any] = ()) -> Iterator[Any]:
    """Celery's in-thread test worker on ``app`` (None with ``NO_WORKER`` set)."""
    from celery.contrib.testing import worker

    if NO_WORKER:
        yield None
        return
    for module in includes:
        app.loader.import_task_module(module)
    for class_task in class_tasks:
        app.register_task(class_task)
    with worker.start_worker(app, pool=pool, **parameters) as w:
        yield w


@pytest.fixture
def celery_worker(celery_app: Celery, celery_includes: Sequence[str], celery_worker_pool: Any,
                  celery_worker_parameters: Mapping[str, Any]) -> Iterator[Any]:
    """A worker in a thread on ``celery_app``, stopped when the test returns."""
    with _worker(celery_app, celery_includes, celery_worker_pool,
                 celery_worker_parameters) as w:
        yield w


@pytest.fixture(scope="session")
def celery_session_app(request: pytest.FixtureRequest,
                       tmp_path_factory: pytest.TempPathFactory, celery_plus_broker_url: str,
                       celery_config: Mapping[str, Any], celery_parameters: Mapping[str, Any],
                       celery_enable_logging: bool,
                       use_celery_app_trap: bool) -> Iterator[Celery]:
    """A ``celery_plus.Celery`` app for the whole session."""
    with _create_app(celery_plus_broker_url, tmp_path_factory.mktemp("celery-plus"),
                     celery_enable_logging, use_celery_app_trap, celery_parameters,
                     **_config(request, celery_config)) as app:
        if not use_celery_app_trap:
            app.set_default()
            app.set_current()
        yield app


@pytest.fixture(scope="session")
def celery_session_worker(celery_session_app: Celery, celery_includes: Sequence[str],
                          celery_class_tasks: Sequence[Any], celery_worker_pool: Any,
                          celery_worker_parameters: Mapping[str, Any]) -> Iterator[Any]:
    """A worker in a thread for the whole session."""
    with _worker(celery_session_app, celery_includes, celery_worker_pool,
                 celery_worker_parameters, celery_class_tasks) as w:
        yield w
