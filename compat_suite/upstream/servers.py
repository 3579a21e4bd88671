"""The stores one upstream run uses, isolated from everything else on the machine.

Celery's integration tasks write fixed Redis keys (``redis-echo``, ``Done``…) into database 0
of ``REDIS_HOST:REDIS_PORT`` and delete them freely, and the result backend is Redis too. So
each run gets a ``redis-server`` of its own on a free loopback port (no persistence), which is
its result backend, the tasks' Redis, and the store of ``redis://`` / ``plus+redis://``
brokers. ``plus+postgresql://`` runs in a schema of its own, dropped afterwards;
``plus+sqlite://`` in a file of the run's workspace.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import redis

#: The shared PostgreSQL of this machine (the project's test database).
DEFAULT_POSTGRES = "postgresql://root@127.0.0.1:5432/test"

#: Short broker names the command line accepts, and what each becomes.
BROKER_KINDS = ("redis", "plus+redis", "plus+sqlite", "plus+postgresql")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def redis_server(workdir: Path) -> Iterator[int]:
    """A ``redis-server`` on a free loopback port, stopped (and its files removed) on exit."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is not on PATH (Debian: apt-get install redis-server)")
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly",
         "no", "--dir", str(workdir), "--logfile", str(workdir / "redis.log")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis(port=port, socket_connect_timeout=1)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                client.ping()
                break
            except redis.exceptions.ConnectionError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"redis-server on port {port} did not start; see "
                                       f"{workdir / 'redis.log'}") from None
                time.sleep(0.05)
        yield port
    finally:
        client.close()
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@dataclass(frozen=True)
class Broker:
    """A broker under test: its URL and the transport options that isolate it."""

    kind: str
    url: str
    transport_options: dict[str, str]
    #: PostgreSQL schema to drop when the run ends (None: nothing to clean).
    pg_schema: str | None = None
    postgres: str = DEFAULT_POSTGRES


def broker_for(name: str, redis_port: int, workspace: Path,
               postgres: str = DEFAULT_POSTGRES) -> Broker:
    """The broker for a short name (``plus+redis``…) or a full URL, given as is."""
    kind = name.split("://", 1)[0]
    if "://" in name and name.split("://", 1)[1]:
        return Broker(kind, name, {})
    if kind == "redis":
        return Broker(kind, f"redis://127.0.0.1:{redis_port}/2", {})
    if kind == "plus+redis":
        return Broker(kind, f"plus+redis://127.0.0.1:{redis_port}/3", {})
    if kind == "plus+sqlite":
        return Broker(kind, f"plus+sqlite:///{(workspace / 'store.db').as_posix()}", {})
    if kind == "plus+postgresql":
        schema = f"upstream_{uuid.uuid4().hex[:10]}"
        return Broker(kind, f"plus+{postgres}", {"plus_pg_schema": schema}, schema, postgres)
    raise ValueError(f"unknown broker {name!r}: give a URL or one of {', '.join(BROKER_KINDS)}")


def drop_schema(broker: Broker) -> None:
    """Drop a ``plus+postgresql://`` run's schema (nothing for other brokers)."""
    if broker.pg_schema is None:
        return
    import psycopg

    with psycopg.connect(broker.postgres, autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{broker.pg_schema}" CASCADE')
