"""Fixtures of the fault suite: private stores, deployments, and the report.

Every scenario runs real ``celery-plus worker`` processes against a store this suite starts
(and breaks) itself: a ``redis-server`` per test, a PostgreSQL cluster per test session (each
test in a schema of its own), or a SQLite file (on a small tmpfs when the scenario fills the
disk). Each scenario writes a :class:`~tests.deploy.faults.harness.Report` line; the session prints
them all at the end (and they stay in ``.faults-report.jsonl``).

The fast variants run in the README's test command, each on one of its stores
(``tests/deploy/matrix.py``). Long variants (the issue's figures: a 30 s lease, a 20 s outage,
kill loops of minutes) are marked ``long`` and run only with ``PLUS_LONG=1``
(``tests/deploy/faults/run_long.sh``, ``tests/run_long.sh``).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from kombu import Connection, Exchange, Queue

from celery_plus.model.options import StoreOptions
from celery_plus.model.store import Backend
from tests.fast.conformance.stores import PG_URL
from tests.support import drop_pg_schema

from .harness import Deployment
from .proxy import FaultProxy
from .servers import PG_BIN, PostgresCluster, RedisServer, SmallDisk, small_disk_available


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PostgresCluster]:
    if not (PG_BIN / "initdb").exists():
        pytest.skip(f"no PostgreSQL server programs in {PG_BIN} (set PLUS_FAULT_PG_BIN)")
    if not shutil.which("runuser") and os.geteuid() == 0:
        pytest.skip("runuser is needed to run PostgreSQL as root")
    cluster = PostgresCluster()
    cluster.start()
    yield cluster
    cluster.close()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[SmallDisk]:
    """A 16 MB tmpfs mounted for the test (skipped where mounting is not allowed)."""
    if not small_disk_available():
        pytest.skip("mounting a tmpfs needs root")
    disk = SmallDisk(tmp_path / "disk", size_kb=16384)
    yield disk
    disk.close()


@pytest.fixture
def prefix() -> str:
    return f"f{uuid.uuid4().hex[:10]}"


@pytest.fixture
def redis_servers(tmp_path: Path) -> Iterator[Callable[..., RedisServer]]:
    made: list[RedisServer] = []

    def make(aof: bool = True) -> RedisServer:
        if not shutil.which("redis-server"):
            pytest.skip("redis-server is not installed")
        server = RedisServer(tmp_path / f"redis-{len(made)}", aof=aof)
        server.start()
        made.append(server)
        return server

    yield make
    for server in made:
        server.close()


def open_view(kind: str, url: str, prefix: str) -> Backend:
    if kind.startswith("redis"):
        from celery_plus.stores.redis.backend import RedisBackend

        return RedisBackend(url, StoreOptions(prefix=prefix))
    if kind == "postgres":
        from celery_plus.stores.postgres.backend import PostgresBackend

        return PostgresBackend(url, schema=prefix)
    from celery_plus.stores.sqlite.backend import SQLiteBackend

    return SQLiteBackend(url, StoreOptions(prefix=prefix))


@pytest.fixture
def deploy(request: pytest.FixtureRequest, tmp_path: Path, prefix: str,
           redis_servers: Callable[..., RedisServer]) -> Iterator[Callable[..., Deployment]]:
    """``deploy(scenario, store, vt=..., sqlite_path=...)``: a deployment on a fresh store.

    ``store``: ``redis-aof`` / ``redis-rdb`` (a private redis-server with / without AOF;
    ``redis`` is ``redis-aof``), ``postgres`` (a schema of the session's private cluster)
    or ``sqlite`` (a file in the test's folder, or ``sqlite_path``). The deployment's
    ``server`` is the store's server (None for SQLite). ``proxied``: the app and workers
    reach the server through a :class:`~tests.deploy.faults.proxy.FaultProxy` (the
    deployment's ``proxy``; the view goes direct); ``conf``: the app's and workers' settings.
    """
    made: list[Deployment] = []
    proxies: list[FaultProxy] = []

    def make(scenario: str, store: str, vt: float = 6.0, sqlite_path: Path | None = None,
             results: str | None = None, proxied: bool = False,
             conf: dict[str, Any] | None = None) -> Deployment:
        server: Any = None
        if store.startswith("redis"):
            server = redis_servers(aof=store != "redis-rdb")
            url = server.url
        elif store == "postgres":
            server = request.getfixturevalue("pg_cluster")
            url = server.url
        else:
            url = f"sqlite:///{sqlite_path or tmp_path / 'store.db'}"
        broker, proxy = f"plus+{url}", None
        if proxied:
            parts = urlsplit(url)
            proxy = FaultProxy(parts.hostname or "127.0.0.1", parts.port or 0)
            proxies.append(proxy)
            broker = "plus+" + url.replace(f":{parts.port}", f":{proxy.port}", 1)
        deployment = Deployment(scenario, store, broker, prefix, tmp_path,
                                lambda: open_view(store, url, prefix), vt, results, conf)
        deployment.server = server  # type: ignore[attr-defined]
        deployment.proxy = proxy  # type: ignore[attr-defined]
        made.append(deployment)
        return deployment

    yield make
    for proxy in proxies:
        proxy.resume()  # a worker stuck on a stalled link stops
    for deployment in made:
        deployment.stop_workers()
        deployment.ledger_anchor.close()
        with contextlib.suppress(Exception):
            deployment.app.close()  # its connections (a result consumer's too)
        with contextlib.suppress(Exception):
            deployment.view.close()
        if deployment.store == "postgres":
            import psycopg

            with contextlib.suppress(Exception), \
                    psycopg.connect(request.getfixturevalue("pg_cluster").url,
                                    autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{prefix}" CASCADE')
    for proxy in proxies:
        proxy.close()


AMQP_URL = "amqp://guest:guest@127.0.0.1:5672//"


def _proxied(url: str, proxy: FaultProxy) -> str:
    port = urlsplit(url).port
    return url.replace(f":{port}", f":{proxy.port}", 1)


def _drop_queue(name: str) -> None:
    with contextlib.suppress(Exception), Connection(AMQP_URL, connect_timeout=2) as conn:
        channel = conn.channel()
        Queue(name, Exchange(name), channel=channel).delete()
        Exchange(name, channel=channel).delete()


@pytest.fixture
def coordinated(tmp_path: Path, prefix: str, redis_servers: Callable[..., RedisServer]
                ) -> Iterator[Callable[..., tuple[Deployment, FaultProxy, dict[str, Any]]]]:
    """``coordinated(store, broker, lease_s, scenario)``: a deployment whose app keeps its broker
    (``amqp`` or plain ``redis``) and names a coordination store (``redis``: a private
    redis-server; ``postgres``: a schema of the shared server); a proxy in front of that
    store, and the settings worker A needs to reach it through the proxy."""
    made: list[tuple[Deployment, FaultProxy, str, str]] = []

    def make(store: str, broker: str, lease_s: float,
             scenario: str = "coordination partition"
             ) -> tuple[Deployment, FaultProxy, dict[str, Any]]:
        server = redis_servers() if store == "redis" or broker == "redis" else None
        url = server.url if store == "redis" and server else PG_URL
        broker_url = AMQP_URL if broker == "amqp" else server.url.rsplit("/", 1)[0] + "/1"
        parts = urlsplit(url)
        proxy = FaultProxy(parts.hostname or "127.0.0.1", parts.port or 0)
        # Short reply bounds: a stalled call gives up well within a lease.
        conf: dict[str, Any] = {"plus_coordination_url": url, "task_default_queue": prefix,
                                "plus_pg_reply_timeout": lease_s / 3,
                                "plus_pg_connect_timeout": 1.0}
        deployment = Deployment(f"{scenario} ({broker})", f"coord-{store}",
                                broker_url, prefix, tmp_path,
                                lambda: open_view(store, url, prefix), lease_s, None, conf)
        made.append((deployment, proxy, store, broker))
        return deployment, proxy, {"plus_coordination_url": _proxied(url, proxy)}

    yield make
    for deployment, proxy, store, broker in made:
        proxy.resume()  # a worker stuck on a stalled link stops
        deployment.stop_workers()
        deployment.ledger_anchor.close()
        with contextlib.suppress(Exception):
            deployment.app.close()
        with contextlib.suppress(Exception):
            deployment.view.close()
        proxy.close()
        if broker == "amqp":
            _drop_queue(prefix)
        if store == "postgres":
            drop_pg_schema(PG_URL, prefix)
