"""A store that refuses writes for now is an outage, not an error of the call (issue 27).

Each store's refusal (Redis ``OOM``, ``NOREPLICAS``, ``READONLY``; PostgreSQL SQLSTATE 25006;
SQLite ``attempt to write a readonly database``) raises one of the transport's
``connection_errors`` naming the store's reply, so a worker retries it as a lost connection;
nothing stored is lost and the store works again once it can write. Real servers: a private
``redis-server`` (never the shared one) and a database of this test's own.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from celery.exceptions import ImproperlyConfigured
from kombu.exceptions import ConnectionError as KombuConnectionError

from celery_plus.model.store import NewJob, Settle
from celery_plus.runtime.throttled import Throttled
from celery_plus.stores.redis import refusals
from celery_plus.stores.redis.backend import RedisBackend
from celery_plus.stores.redis.eviction import check_policy
from celery_plus.transport import Transport
from tests.redis_servers import RedisServer, redis_server
from tests.support import set_pg_read_only


def job(n: int) -> NewJob:
    return NewJob(id=f"j{n}", queue="q", message=f"m{n}", name="t")


def is_connection_error(exc: BaseException) -> bool:
    return isinstance(exc, Transport.connection_errors)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    with redis_server(tmp_path / "redis") as srv:
        yield srv


def test_refusal_codes_are_read_from_plain_and_script_replies() -> None:
    assert refusals.refusal_code("OOM command not allowed when used memory > 'maxmemory'.") \
        == "OOM"
    assert refusals.refusal_code("NOREPLICAS Not enough good replicas to write.") \
        == "NOREPLICAS"
    assert refusals.refusal_code("MISCONF Redis is configured to save RDB snapshots") \
        == "MISCONF"
    assert refusals.refusal_code(
        "Error running script (call to f_x): @user_script:1: -OOM command not allowed") == "OOM"
    assert refusals.refusal_code("MASTERDOWN Link with MASTER is down") == "MASTERDOWN"
    assert refusals.refusal_code("ERR wrong number of arguments") is None
    assert refusals.refusal_code("Error running script: user_script:3: bad OOMPH") is None


@pytest.mark.parametrize("refuse", ["maxmemory", "min-replicas-to-write"])
def test_a_redis_server_refusing_writes_is_a_connection_error_naming_its_reply(
        server: RedisServer, refuse: str, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch) -> None:
    store = RedisBackend(server.url)
    admin = server.client()
    try:
        store.publish(job(0))
        held = store.claim(["q"], "w", 1).claims[0]
        if refuse == "maxmemory":
            admin.config_set("maxmemory", 1)  # every write is over the limit: OOM
        else:
            admin.config_set("min-replicas-to-write", 1)  # no replica: NOREPLICAS
        # A fresh throttle: an earlier test of this process may have warned of this code.
        monkeypatch.setattr(refusals, "_warnings",
                            Throttled(refusals.logger, refusals.WARN_EVERY_S))
        with caplog.at_level(logging.WARNING, "celery_plus.stores.redis"):
            for call in (lambda: store.publish(job(1)),
                         lambda: store.claim(["q"], "w", 1,
                                             [Settle(held.job_id, held.token, "ack")]),
                         lambda: store.heartbeat([(held.job_id, held.token)]),
                         lambda: store.publish_many([job(2)])):
                with pytest.raises(refusals.StoreRefused) as raised:
                    call()
                assert is_connection_error(raised.value)
                assert raised.value.code == ("OOM" if refuse == "maxmemory" else "NOREPLICAS")
        warnings = [r for r in caplog.records if "refuses writes" in r.getMessage()]
        assert len(warnings) == 1, warnings  # one clear warning, not one per call
        assert raised.value.code in warnings[0].getMessage()
        with pytest.raises(refusals.StoreRefused):
            store.connect()  # PING answers, a write does not: Celery's reconnect backs off
        admin.config_set("maxmemory", 0)
        admin.config_set("min-replicas-to-write", 0)
        result = store.claim(["q"], "w", 5, [Settle(held.job_id, held.token, "ack")])
        assert result.claims == []  # nothing of the refused calls was stored
        assert store.record("j0").state == "completed"  # type: ignore[union-attr]
        assert store.record("j1") is None
        store.publish(job(3))
        assert [c.job_id for c in store.claim(["q"], "w", 5).claims] == ["j3"]
    finally:
        store.close()


def test_a_read_only_replica_is_a_connection_error(tmp_path: Path) -> None:
    with redis_server(tmp_path / "primary") as primary, \
            redis_server(tmp_path / "replica") as replica:
        store = RedisBackend(replica.url)
        try:
            store.publish(job(0))
            replica.client().replicaof("127.0.0.1", primary.port)
            with pytest.raises(refusals.StoreRefused) as raised:
                store.publish(job(1))
            assert raised.value.code == "READONLY" and is_connection_error(raised.value)
        finally:
            store.close()


@pytest.mark.parametrize("policy", ["allkeys-lru", "volatile-ttl"])
def test_an_evicting_redis_server_is_refused_at_connect_naming_the_fix(
        server: RedisServer, policy: str) -> None:
    server.client().config_set("maxmemory-policy", policy)
    store = RedisBackend(server.url, allow_eviction=False)
    try:
        with pytest.raises(ImproperlyConfigured) as raised:
            store.connect()
        text = str(raised.value)
        assert f"maxmemory-policy={policy!r}" in text
        assert "CONFIG SET maxmemory-policy noeviction" in text
        assert "plus_redis_allow_eviction=True" in text
        RedisBackend(server.url, allow_eviction=True).connect()  # the opt-out starts
        server.client().config_set("maxmemory-policy", "noeviction")
        store.connect()
    finally:
        store.close()


def test_a_server_that_denies_config_get_is_warned_about(
        caplog: pytest.LogCaptureFixture) -> None:
    class Managed:
        def config_get(self, name: str) -> dict[str, str]:
            raise redis.exceptions.ResponseError("unknown command 'CONFIG'")

    with caplog.at_level(logging.WARNING, "celery_plus.stores.redis"):
        check_policy(Managed(), "redis://managed:6379/0", allow_eviction=False)
    assert "maxmemory-policy" in caplog.text and "noeviction" in caplog.text


def test_the_opt_out_is_a_setting_whose_misspelling_is_caught() -> None:
    from celery_plus import settings

    assert settings.resolve({"plus_redis_allow_eviction": True}).redis_allow_eviction
    assert not settings.resolve({}).redis_allow_eviction
    with pytest.raises(ImproperlyConfigured, match="plus_redis_allow_eviction"):
        settings.resolve({"plus_redis_allow_evictions": True})


def test_a_read_only_sqlite_store_is_unavailable_naming_its_file(tmp_path: Path) -> None:
    from celery_plus.stores.sqlite.backend import SQLiteBackend, StoreUnavailable

    store = SQLiteBackend(f"sqlite:///{tmp_path / 'store.db'}")
    try:
        store.publish(job(0))
        held = store.claim(["q"], "w", 1).claims[0]
        with store._lock:
            store._connection().execute("PRAGMA query_only = ON")
        with pytest.raises(StoreUnavailable) as raised:
            store.publish(job(1))
        assert isinstance(raised.value, KombuConnectionError)
        assert "readonly database" in str(raised.value)
        assert str(tmp_path / "store.db") in str(raised.value)
        with store._lock:
            store._connection().execute("PRAGMA query_only = OFF")
        assert store.settle([Settle(held.job_id, held.token, "ack")]) == []
        assert store.record("j0").state == "completed"  # type: ignore[union-attr]
    finally:
        store.close()


@pytest.fixture
def pg_database() -> Iterator[str]:
    """A database of this test's own on the session's PostgreSQL, dropped afterwards."""
    import os

    import psycopg

    base = os.environ.get("PLUS_TEST_PG", "postgresql://postgres@127.0.0.1:5432/test")
    name = f"plus_refusal_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(base, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield base.rsplit("/", 1)[0] + "/" + name
    finally:
        with psycopg.connect(base, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def test_a_read_only_postgresql_database_is_a_connection_error(pg_database: str) -> None:
    from celery_plus.stores.postgres.backend import PostgresBackend, StoreUnavailable

    store = PostgresBackend(pg_database)
    try:
        store.publish(job(0))
        held = store.claim(["q"], "w", 1).claims[0]
        set_pg_read_only(pg_database, True)
        for call in (lambda: store.publish(job(1)),
                     lambda: store.settle([Settle(held.job_id, held.token, "ack")])):
            with pytest.raises(StoreUnavailable) as raised:
                call()
            assert is_connection_error(raised.value)
            assert "read-only transaction" in str(raised.value)
            assert "25006" in str(raised.value)
        with pytest.raises(StoreUnavailable, match="read-only"):
            store.connect()  # Celery's reconnect backs off
        set_pg_read_only(pg_database, False)
        store.connect()
        assert store.settle([Settle(held.job_id, held.token, "ack")]) == []
        assert store.record("j0").state == "completed"  # type: ignore[union-attr]
        assert store.record("j1") is None
    finally:
        store.close()


@pytest.mark.parametrize("compact", [True, False])
def test_a_waiting_job_whose_message_was_evicted_is_dead_lettered_not_claimed(
        server: RedisServer, compact: bool) -> None:
    from celery_plus.model.options import StoreOptions

    store = RedisBackend(server.url, StoreOptions(compact_records=compact))
    try:
        for n in range(3):
            store.publish(job(n))
        if compact:
            server.client().delete(store.key("m", "j1"))  # what an eviction does
        else:
            server.client().hdel(store.key("job", "j1"), "msg")
        claimed = store.claim(["q"], "w", 5)
        assert [c.job_id for c in claimed.claims] == ["j0", "j2"]
        assert all(c.message for c in claimed.claims)
        dead = store.record("j1")
        assert dead is not None and dead.state == "failed"
        assert dead.reason == "message missing"
        assert "maxmemory-policy noeviction" in (dead.exc_message or "")
    finally:
        store.close()
