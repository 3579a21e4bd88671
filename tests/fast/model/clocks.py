"""Stores on a virtual clock: each real store, and the model, read one clock the test moves.

The stores take ``now`` from their server (Redis ``TIME``, PostgreSQL ``now_ms()``, SQLite the
host's ``time.time()``). For a model-based test every step must see the same instant on both
sides, and time must jump (past leases, holds, TTLs) without waiting. So, for the test only:

* SQLite: ``sqlite_backend._now_ms`` (the one clock of the module) reads the virtual clock.
* PostgreSQL: the test schema's ``now_ms()`` is replaced by a read of a one-row table.
* Redis: the scripts' prelude reads ``NOW`` from the key ``<prefix>:clock`` instead of
  ``TIME`` (a script library of its own, made from the same sources). Redis still expires
  keys (unique holds) by real time, so when the virtual clock moves by ``d`` every key of
  the test's prefix with a TTL is moved ``d`` closer to its end (``PEXPIRE``, or deleted).
  Real time passes too while the clock stands still: a hold the model says is live must not
  be within :data:`GUARD_MS` of its deadline, which the test's clock moves avoid
  (``tests/fast/model/machine.py``).

Nothing here changes how a store decides; only where its clock comes from.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol
from unittest import mock

import psycopg
import redis

from celery_plus.model.admin import AdminStore
from celery_plus.model.options import StoreOptions
from celery_plus.model.store import Backend
from celery_plus.stores.redis import backend as redis_backend
from celery_plus.stores.redis.admin import RedisAdmin
from celery_plus.stores.redis.scripts import ScriptLibrary, admin_sources, store_sources
from celery_plus.stores.sqlite import backend as sqlite_backend
from celery_plus.stores.sqlite.admin import SQLiteAdmin
from tests.fast.conformance.stores import PG_URL

#: The model tests' Redis: a database of its own, so that the store's key scans
#: (``holds()``, the clock's TTL moves) see this test's keys only.
REDIS_URL = os.environ.get("PLUS_MODEL_REDIS", "redis://127.0.0.1:6379/12")

#: Real time an example may take before a Redis hold could lapse earlier than its virtual
#: deadline: no live hold is ever left this close to its deadline (virtual ms).
GUARD_MS = 20_000


class Clock:
    """The virtual clock (ms since the epoch): callable, moved by :meth:`advance`."""

    def __init__(self, start: int) -> None:
        self.now = start

    def __call__(self) -> int:
        return self.now


class StoreUnderTest(Protocol):
    """A real store following a :class:`Clock`."""

    kind: str
    backend: Backend
    admin: AdminStore

    def moved(self, by_ms: int) -> None:
        """The clock moved forward by ``by_ms`` (the store's view of time follows)."""

    def unthrottle(self) -> None:
        """Let the next ``maintain`` run (its once-per-interval lock taken away)."""

    def close(self) -> None: ...


# -- Redis --------------------------------------------------------------------------------
#: The prelude's clock in ``lua/lib.lua`` (EVALSHA scripts) and in the function library.
_LIB_TIME = ("local t = redis.call('TIME')\n"
             "local NOW = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n")
_LIB_CLOCK = "local NOW = tonumber(redis.call('GET', P .. ':clock'))\n"
_FUNCTION_TIME = ("  local t = redis.call('TIME')\n"
                  "  NOW = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n")
_FUNCTION_CLOCK = "  NOW = tonumber(redis.call('GET', P .. ':clock'))\n"


def _swap(source: str, old: str, new: str) -> str:
    if source.count(old) != 1:
        raise AssertionError(f"the Lua prelude changed: cannot find {old!r} once")
    return source.replace(old, new)


def clocked_library(client: redis.Redis) -> ScriptLibrary:
    """The store's scripts, reading ``NOW`` from ``<prefix>:clock``."""
    lib, bodies = store_sources()
    library = ScriptLibrary(client, _swap(lib, _LIB_TIME, _LIB_CLOCK), bodies)
    library._library_source = _swap(library._library_source, _FUNCTION_TIME, _FUNCTION_CLOCK)
    return library


class RedisUnderTest:
    kind = "redis"

    def __init__(self, clock: Clock, options: StoreOptions) -> None:
        self.prefix = f"m{uuid.uuid4().hex[:10]}"
        self.client = redis.Redis.from_url(REDIS_URL)
        self.client.set(f"{self.prefix}:clock", clock.now)
        self.clock = clock
        self.backend = redis_backend.RedisBackend(
            REDIS_URL, dataclasses.replace(options, prefix=self.prefix))
        self.backend.scripts = clocked_library(self.backend.client)
        admin = RedisAdmin(self.backend)
        admin._scripts = {name: self.backend.client.register_script(
            _swap(source, _LIB_TIME, _LIB_CLOCK)) for name, source in admin_sources().items()}
        self.admin = admin

    def moved(self, by_ms: int) -> None:
        keys = [k for k in self.client.scan_iter(f"{self.prefix}:*", count=1000)
                if not k.endswith(b":clock")]
        pipe = self.client.pipeline(transaction=False)
        for key in keys:
            pipe.pttl(key)
        left = pipe.execute()
        pipe = self.client.pipeline(transaction=True)
        for key, ttl in zip(keys, left, strict=True):
            if ttl > 0:
                if ttl - by_ms > 0:
                    pipe.pexpire(key, ttl - by_ms)
                else:
                    pipe.delete(key)
        pipe.set(f"{self.prefix}:clock", self.clock.now)
        pipe.execute()

    def unthrottle(self) -> None:
        self.client.delete(f"{self.prefix}:maint")

    def close(self) -> None:
        self.backend.close()
        keys = list(self.client.scan_iter(f"{self.prefix}:*", count=1000))
        if keys:
            self.client.delete(*keys)
        self.client.close()


# -- SQLite -------------------------------------------------------------------------------
class SQLiteUnderTest:
    kind = "sqlite"

    def __init__(self, clock: Clock, folder: Path, options: StoreOptions) -> None:
        self._clock = mock.patch.object(sqlite_backend, "_now_ms", clock)
        self._clock.start()
        self.path = folder / f"model-{uuid.uuid4().hex[:10]}.db"
        self.backend = sqlite_backend.SQLiteBackend(f"sqlite:///{self.path}", options)
        self.admin = SQLiteAdmin(self.backend)

    def moved(self, by_ms: int) -> None:
        """Nothing to do: the backend reads the clock itself."""

    def unthrottle(self) -> None:
        self.backend._write(lambda tx: tx.run("UPDATE meta SET value = 0 WHERE key = 'maint'"))

    def close(self) -> None:
        self.backend.close()
        self._clock.stop()
        for suffix in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{self.path}{suffix}")


# -- PostgreSQL ---------------------------------------------------------------------------
_PG_CLOCK = """
CREATE TABLE plus_test_clock (ms bigint NOT NULL);
INSERT INTO plus_test_clock VALUES (0);
CREATE OR REPLACE FUNCTION now_ms() RETURNS bigint
LANGUAGE sql VOLATILE AS $$ SELECT ms FROM plus_test_clock $$;
"""


class PostgresSchema:
    """A schema of the test database whose ``now_ms()`` reads a one-row table, with one
    backend on it; emptied between examples (made once per test: migrating a schema and
    opening a pool take far longer than an example)."""

    def __init__(self, options: StoreOptions) -> None:
        from celery_plus.stores.postgres.admin import PostgresAdmin
        from celery_plus.stores.postgres.backend import PostgresBackend

        self.name = f"m{uuid.uuid4().hex[:10]}"
        self.conn = psycopg.connect(PG_URL, autocommit=True)
        self.backend = PostgresBackend(PG_URL, options, schema=self.name)
        self.admin = PostgresAdmin(self.backend)
        self.conn.execute(f'SET search_path TO "{self.name}"')
        self.conn.execute(_PG_CLOCK)
        self.tables = [row[0] for row in self.conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s AND tablename NOT IN "
            "('schema_migrations', 'plus_test_clock')", [self.name])]

    def empty(self, now: int) -> None:
        self.conn.execute(f"TRUNCATE {', '.join(self.tables)}")
        self.conn.execute("INSERT INTO meta (key, value) VALUES ('maint', 0), "
                          "('group_cursor', 0)")
        self.conn.execute("SELECT setval('seq', 1, false), setval('tokens', 1, false)")
        self.set_now(now)

    def set_now(self, now: int) -> None:
        self.conn.execute("UPDATE plus_test_clock SET ms = %s", [now])

    def drop(self) -> None:
        self.backend.close()
        self.conn.execute(f'DROP SCHEMA IF EXISTS "{self.name}" CASCADE')
        self.conn.close()


class PostgresUnderTest:
    kind = "postgres"

    def __init__(self, clock: Clock, schema: PostgresSchema) -> None:
        self.clock, self.schema = clock, schema
        schema.empty(clock.now)
        self.backend, self.admin = schema.backend, schema.admin

    def moved(self, by_ms: int) -> None:
        self.schema.set_now(self.clock.now)

    def unthrottle(self) -> None:
        self.schema.conn.execute("UPDATE meta SET value = 0 WHERE key = 'maint'")

    def close(self) -> None:
        """The schema's backend serves the next example."""


@contextlib.contextmanager
def postgres_schema(options: StoreOptions) -> Iterator[PostgresSchema]:
    schema = PostgresSchema(options)
    try:
        yield schema
    finally:
        schema.drop()
