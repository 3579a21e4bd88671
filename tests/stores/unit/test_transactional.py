"""``celery_plus.enqueue_in`` / ``enqueue_after_commit``: the rules around the transaction.

Covers the transactional-enqueue acceptance lines that need no worker: ``enqueue_in`` writes
with the caller's connection and refuses what would silently not be transactional (a broker
other than plus+postgresql, an autocommit connection with no transaction open, a database
without the store); Django's connection is unwrapped (duck-typed, Django not installed); the
after-commit form holds jobs until an ``on_commit``-style registrar runs them (any broker —
Redis here), resolves duplicates then, drops everything when the block raises, and refuses a
psycopg transaction still open at the end of the block.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
import redis
from celery.exceptions import ImproperlyConfigured

from celery_plus import enqueue_after_commit, enqueue_in
from celery_plus.model.options import StoreOptions
from celery_plus.stores.postgres.backend import PostgresBackend
from celery_plus.stores.redis.backend import RedisBackend
from tests.deploy.e2e import proj
from tests.fast.conformance.stores import PG_URL, REDIS_URL
from tests.inspectors import inspector_for
from tests.support import drop_pg_schema


@pytest.fixture
def prefix() -> Iterator[str]:
    name = f"u{uuid.uuid4().hex[:10]}"
    yield name
    client = redis.Redis.from_url(REDIS_URL)
    for key in list(client.scan_iter(f"{name}:*", count=1000)):
        client.delete(key)
    client.close()
    drop_pg_schema(PG_URL, proj.pg_schema(name))


@pytest.fixture
def make_app(prefix: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str], Any]]:
    """``make_app("pg" | "redis")``: the e2e project's app on that broker (no worker)."""
    apps: list[Any] = []

    def make(kind: str) -> Any:
        url = f"plus+{PG_URL}" if kind == "pg" else f"plus+{REDIS_URL}"
        monkeypatch.setenv("PLUS_TEST_BROKER", url)
        app = proj.make_app(prefix)
        apps.append(app)
        return app

    yield make
    for app in apps:
        app.close()


class FakeDjangoConnection:
    """Duck-typed ``django.db.connection``: a wrapper with ensure_connection / .connection."""

    def __init__(self, raw: Any) -> None:
        self._raw = raw
        self.connection: Any = None
        self.callbacks: list[Callable[[], Any]] = []

    def ensure_connection(self) -> None:
        self.connection = self._raw

    def on_commit(self, func: Callable[[], Any]) -> None:
        self.callbacks.append(func)


def test_enqueue_in_writes_in_the_callers_transaction(make_app: Callable[[str], Any],
                                                       prefix: str) -> None:
    app = make_app("pg")
    task = app.tasks["proj.tx_mark"]
    view = PostgresBackend(PG_URL, schema=proj.pg_schema(prefix))
    try:
        with psycopg.connect(PG_URL) as conn:
            with enqueue_in(FakeDjangoConnection(conn)) as raw:
                assert raw is conn
                result = task.delay("x")
                assert result.deduplicated is False
                assert inspector_for(view).job(result.id) is None, "visible before the commit"
                assert task.delay("x").deduplicated is True, "the same transaction sees its hold"
            conn.commit()
        assert inspector_for(view).job(result.id)["st"] == "enqueued"  # type: ignore[index]
        assert list(inspector_for(view).holds().values()) == [result.id]
    finally:
        view.close()


def test_enqueue_in_refuses_what_would_not_be_transactional(
        make_app: Callable[[str], Any]) -> None:
    task = make_app("redis").tasks["proj.tx_mark"]
    with psycopg.connect(PG_URL) as conn, enqueue_in(conn), \
            pytest.raises(ImproperlyConfigured, match="plus\\+postgresql"):
        task.delay("on-redis")
    task = make_app("pg").tasks["proj.tx_mark"]
    with psycopg.connect(PG_URL, autocommit=True) as conn, enqueue_in(conn), \
            pytest.raises(ImproperlyConfigured, match="autocommit"):
        task.delay("no-transaction")
    other_db = PG_URL.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(other_db) as conn, enqueue_in(conn), \
            pytest.raises(ImproperlyConfigured, match="not in the database"):
        task.delay("elsewhere")
    with pytest.raises(TypeError), enqueue_in(object()):
        pass


def test_after_commit_holds_jobs_until_the_registrar_runs_them(
        make_app: Callable[[str], Any], prefix: str) -> None:
    app = make_app("redis")
    task = app.tasks["proj.tx_mark"]
    store = RedisBackend(REDIS_URL, StoreOptions(prefix=prefix))
    registrar = FakeDjangoConnection(None)
    try:
        with enqueue_after_commit(registrar):
            first = task.delay("k")
            second = task.delay("k")
            assert first.deduplicated is None and second.deduplicated is None
        assert store.size("celery") == 0, "published before the commit"
        assert len(registrar.callbacks) == 1
        registrar.callbacks[0]()  # the transaction committed
        assert store.size("celery") == 1
        assert first.deduplicated is False
        assert second.deduplicated is True and second.id == first.id
        # A plain on_commit-style function works too; a block that raises publishes nothing.
        callbacks: list[Callable[[], Any]] = []
        with pytest.raises(RuntimeError), enqueue_after_commit(callbacks.append):
            task.delay("never")
            raise RuntimeError("the view failed")
        assert callbacks == [] and store.size("celery") == 1
    finally:
        store.close()


def test_after_commit_on_psycopg_needs_the_transaction_to_end_in_the_block(
        make_app: Callable[[str], Any], prefix: str) -> None:
    task = make_app("redis").tasks["proj.tx_mark"]
    store = RedisBackend(REDIS_URL, StoreOptions(prefix=prefix))
    try:
        with psycopg.connect(PG_URL) as conn:
            with pytest.raises(ImproperlyConfigured, match="still open"), \
                    enqueue_after_commit(conn):
                task.delay("open")
            conn.rollback()
            with enqueue_after_commit(conn):
                task.delay("committed")
                conn.commit()
        assert store.size("celery") == 1
        # Without Django (the test extra installs it: hide it here).
        with pytest.MonkeyPatch.context() as patch:
            patch.setitem(sys.modules, "django.db", None)
            with pytest.raises(ImproperlyConfigured, match="Django"), enqueue_after_commit():
                pass
    finally:
        store.close()
