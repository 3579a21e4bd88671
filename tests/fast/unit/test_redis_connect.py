"""Defect 11 of issue 12 (unit level): the broker's connection options reach the Redis
store's clients exactly as kombu's Redis transport passes them to redis-py."""

from __future__ import annotations

import ssl
from typing import Any

import pytest
import redis
from celery.exceptions import ImproperlyConfigured

from celery_plus import Celery
from celery_plus.stores.redis.connect import RedisConnect


def reply_bound(kwargs: dict[str, Any]) -> float | None:
    """The reply bound a pool's connections get: kept by the kernel through the parser, so
    redis-py's own (Python-level, a poll() per call) is off."""
    assert kwargs["socket_timeout"] is None
    bound: float | None = getattr(kwargs["parser_class"], "reply_timeout", None)
    return bound


def _pool(**conf: Any) -> Any:
    app = Celery("conn", broker=conf.pop("broker", "plus+redis://127.0.0.1:6379/3"),
                 set_as_current=False)
    app.conf.update(conf)
    with app.connection_for_write() as conn:
        return conn.transport.backend.client.connection_pool


def test_transport_options_reach_the_connection_pool() -> None:
    pool = _pool(broker_transport_options={
        "socket_timeout": 7.5, "socket_connect_timeout": 2.5, "socket_keepalive": True,
        "health_check_interval": 11, "retry_on_timeout": True, "client_name": "plus-test",
        "max_connections": 9, "socket_keepalive_options": {1: 5}})
    kwargs = pool.connection_kwargs
    assert (reply_bound(kwargs), kwargs["socket_connect_timeout"]) == (7.5, 2.5)
    assert kwargs["socket_keepalive"] is True and kwargs["health_check_interval"] == 11
    assert kwargs["client_name"] == "plus-test" and kwargs["db"] == 3
    assert kwargs["retry_on_timeout"] is True and kwargs["socket_keepalive_options"] == {1: 5}
    assert pool.max_connections == 9


def test_the_health_check_defaults_to_kombus_25_seconds() -> None:
    assert _pool().connection_kwargs["health_check_interval"] == 25


def test_broker_use_ssl_makes_tls_connections_with_its_certificates() -> None:
    pool = _pool(broker_use_ssl={"ssl_cert_reqs": ssl.CERT_REQUIRED,
                                 "ssl_ca_certs": "/etc/ca.pem", "ssl_certfile": "/c.pem",
                                 "ssl_keyfile": "/k.pem"})
    assert issubclass(pool.connection_class, redis.SSLConnection)
    kwargs = pool.connection_kwargs
    assert kwargs["ssl_ca_certs"] == "/etc/ca.pem" and kwargs["ssl_cert_reqs"] == ssl.CERT_REQUIRED
    assert (kwargs["ssl_certfile"], kwargs["ssl_keyfile"]) == ("/c.pem", "/k.pem")


def test_a_rediss_url_is_tls_too() -> None:
    pool = _pool(broker="plus+rediss://127.0.0.1:6380/0?ssl_cert_reqs=required")
    assert issubclass(pool.connection_class, redis.SSLConnection)


@pytest.mark.parametrize("url", ["plus+redis+socket:///run/r.sock?virtual_host=4",
                                 "plus+socket:///run/r.sock?virtual_host=4"])
def test_a_unix_socket_url_is_kombus_form_without_tcp_options(url: str) -> None:
    pool = _pool(broker=url)
    assert issubclass(pool.connection_class, redis.UnixDomainSocketConnection)
    kwargs = pool.connection_kwargs
    assert kwargs["path"] == "/run/r.sock" and kwargs["db"] == 4
    assert "socket_keepalive" not in kwargs and "socket_keepalive_options" not in kwargs
    assert reply_bound(kwargs) == 5.0 and kwargs["socket_connect_timeout"] == 5.0


def test_tls_on_a_unix_socket_is_refused_naming_the_setting() -> None:
    with pytest.raises(ImproperlyConfigured, match=r"broker_use_ssl .* Unix socket"):
        _pool(broker="plus+redis+socket:///run/r.sock", broker_use_ssl={"ssl_ca_certs": "/c"})


def test_an_unknown_ssl_option_fails_naming_the_valid_ones() -> None:
    with pytest.raises(ImproperlyConfigured, match="ssl_ca_certs"):
        RedisConnect("redis://127.0.0.1:6379/0", ssl={"ca_certs": "/x"}).client()


def test_sentinel_needs_a_master_name() -> None:
    with pytest.raises(ImproperlyConfigured, match="master_name"):
        RedisConnect("sentinel://127.0.0.1:26379/0").client()


def test_sentinel_addresses_come_from_every_url() -> None:
    connect = RedisConnect("sentinel://a:26379",
                           options={"master_name": "m", "min_other_sentinels": 1,
                                    "sentinel_kwargs": {"password": "for-sentinels"}},
                           alternates=("plus+sentinel://a:26379",
                                       "sentinel://:secret@b:26380/4"))
    client = connect.client()
    sentinels = client.connection_pool.sentinel_manager.sentinels
    assert [(s.connection_pool.connection_kwargs["host"],
             s.connection_pool.connection_kwargs["port"]) for s in sentinels] == [
        ("a", 26379), ("b", 26380)]
    assert client.connection_pool.connection_kwargs["db"] == 4
    assert client.connection_pool.connection_kwargs["password"] == "secret"
    manager = client.connection_pool.sentinel_manager
    assert manager.min_other_sentinels == 1
    assert sentinels[0].connection_pool.connection_kwargs["password"] == "for-sentinels"


def test_a_cluster_url_gives_every_address_as_a_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    from celery_plus.stores.redis import connect

    made: dict[str, Any] = {}
    monkeypatch.setattr(connect, "RedisCluster", lambda **kwargs: made.update(kwargs) or made)
    RedisConnect("redis+cluster://u:secret@10.0.0.1:7000/0;redis+cluster://10.0.0.2:7001",
                 alternates=("plus+redis+cluster://10.0.0.3:7002",),
                 options={"socket_timeout": 5, "max_connections": 7}).cluster_client()
    assert [(n.host, n.port) for n in made["startup_nodes"]] == [
        ("10.0.0.1", 7000), ("10.0.0.2", 7001), ("10.0.0.3", 7002)]
    assert (made["username"], made["password"]) == ("u", "secret")
    assert made["socket_timeout"] == 5 and made["max_connections"] == 7
    made.clear()
    RedisConnect("redis+cluster://10.0.0.1:7000").cluster_client()
    # No default reply bound: the cluster client would send a slow script again.
    assert made["socket_timeout"] is None and made["socket_keepalive"] is True


def test_a_cluster_has_database_0_only() -> None:
    with pytest.raises(ImproperlyConfigured, match="database 0 only"):
        RedisConnect("redis+cluster://127.0.0.1:7000/3").cluster_client()


def test_a_cluster_store_that_is_down_is_made_and_then_a_connection_error() -> None:
    from celery_plus.stores.redis.cluster import RedisClusterBackend

    backend = RedisClusterBackend("redis+cluster://127.0.0.1:1/0")  # nothing contacted yet
    with pytest.raises(redis.exceptions.ConnectionError, match="cannot be connected"):
        backend.connect()
    backend.close()


def test_every_connection_is_bounded_in_time_by_default() -> None:
    """Issue #27: a reply, a connection's set-up and a dead idle link have bounds even on a
    redis-py whose own defaults wait forever."""
    kwargs = _pool().connection_kwargs
    assert (reply_bound(kwargs), kwargs["socket_connect_timeout"]) == (5.0, 5.0)
    assert kwargs["socket_keepalive"] is True
    assert sum(kwargs["socket_keepalive_options"].values()) > 0
