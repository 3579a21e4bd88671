"""How the Redis store connects: the broker's connection options, as kombu's Redis transport
reads them, turned into redis-py clients.

* ``broker_use_ssl`` (``ssl_cert_reqs``, ``ssl_ca_certs``, ``ssl_certfile``, ``ssl_keyfile``)
  and ``rediss://`` URLs (their ``?ssl_cert_reqs=…`` query too);
* ``broker_transport_options``: ``socket_timeout``, ``socket_connect_timeout``,
  ``socket_keepalive``, ``socket_keepalive_options``, ``max_connections``,
  ``health_check_interval``, ``retry_on_timeout``, ``client_name``; the first four have
  bounded defaults (:data:`DEFAULT_BOUNDS`: no connection waits forever);
* ``plus+sentinel://h1:26379;sentinel://h2:26379/0`` (kombu's Sentinel URL form) with
  ``master_name`` (required), ``sentinel_kwargs`` and ``min_other_sentinels`` in the
  transport options; the master is looked up again on every new connection (failover).
* ``plus+redis+cluster://h1:7000/0;redis+cluster://h2:7000`` (or ``rediss+cluster``): a Redis
  Cluster, every address a seed node (redis-py's ``RedisCluster``; db 0 only).
* ``plus+redis+socket:///run/redis.sock?virtual_host=1`` (or ``plus+socket://``, kombu's forms): a
  server's Unix socket; TCP keepalives do not apply there, every other bound does.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit

import redis
from celery.exceptions import ImproperlyConfigured
from kombu.utils.url import maybe_sanitize_url
from redis.cluster import ClusterNode, RedisCluster

from celery_plus.stores.redis.reply_bound import connection_bound

#: Transport options passed to every redis-py connection (kombu's Redis transport's names).
CONNECTION_OPTIONS = ("socket_timeout", "socket_connect_timeout", "socket_keepalive",
                      "socket_keepalive_options", "health_check_interval", "retry_on_timeout",
                      "client_name")
SSL_OPTIONS = ("ssl_cert_reqs", "ssl_ca_certs", "ssl_certfile", "ssl_keyfile")
#: URL schemes of a Redis Cluster store (``plus+redis+cluster://``).
CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
#: URL schemes of a store reached through its Unix socket (kombu's names).
SOCKET_SCHEMES = ("redis+socket", "socket")
#: Options of a TCP link only: a Unix socket's connection takes none of them.
TCP_ONLY_OPTIONS = ("socket_keepalive", "socket_keepalive_options")
#: A connection idle this long is checked with PING before use (kombu's default too).
DEFAULT_HEALTH_CHECK_S = 25
#: Time bounds of every connection unless the transport options set them (redis-py before
#: 8 waits forever by default): a command's reply (kept by the kernel: ``reply_bound.py``),
#: a connection's set-up, and TCP keepalives that fail a dead idle link within 5 + 2 x 5 s.
#: A blocking pop waits at most ``plus_poll_interval``, keep ``socket_timeout`` above it.
DEFAULT_BOUNDS: dict[str, Any] = {"socket_timeout": 5.0, "socket_connect_timeout": 5.0,
                                  "socket_keepalive": True}
#: (option, seconds) of the default keepalive: idle before the first probe, between probes,
#: probes unanswered before the link is dead.
_KEEPALIVE = (("TCP_KEEPIDLE", 5), ("TCP_KEEPINTVL", 2), ("TCP_KEEPCNT", 5))


def default_keepalive_options() -> dict[int, int]:
    """The default ``socket_keepalive_options`` (the options this platform has)."""
    return {getattr(socket, name): value for name, value in _KEEPALIVE
            if hasattr(socket, name)}


@dataclass(frozen=True)
class RedisConnect:
    """Everything needed to make a client of one store; :meth:`client` makes a new one."""

    url: str
    #: The broker URLs kombu split off ``;`` (Sentinel: every sentinel's address).
    alternates: tuple[str, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)
    ssl: Mapping[str, Any] | bool | None = None

    @property
    def is_sentinel(self) -> bool:
        return self.url.partition("://")[0] == "sentinel"

    @property
    def is_cluster(self) -> bool:
        return self.url.partition("://")[0] in CLUSTER_SCHEMES

    @property
    def is_unix_socket(self) -> bool:
        return self.url.partition("://")[0] in SOCKET_SCHEMES

    def _connection_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"health_check_interval": DEFAULT_HEALTH_CHECK_S,
                                  **DEFAULT_BOUNDS}
        if self.options.get("socket_keepalive") is not False:
            kwargs["socket_keepalive_options"] = default_keepalive_options()
        kwargs.update({k: self.options[k] for k in CONNECTION_OPTIONS
                       if self.options.get(k) is not None})
        return kwargs

    def reply_timeout(self) -> float | None:
        """The bound of one reply: ``socket_timeout`` as given, else the default."""
        given = self.options.get("socket_timeout")
        return DEFAULT_BOUNDS["socket_timeout"] if given is None else float(given)

    def _ssl_kwargs(self) -> dict[str, Any]:
        if not self.ssl:
            return {}
        given = dict(self.ssl) if isinstance(self.ssl, Mapping) else {}
        unknown = sorted(set(given) - set(SSL_OPTIONS))
        if unknown:
            raise ImproperlyConfigured(
                f"broker_use_ssl: unknown key(s) {unknown} for the plus+redis:// store; "
                f"use {', '.join(SSL_OPTIONS)} (as for Celery's redis:// broker).")
        return {"ssl": True, **{k: v for k, v in given.items() if v is not None}}

    def client(self) -> redis.Redis:
        """A new client (its own connection pool) of the store; its connections parse a
        server's write refusals as connection errors (``refusals.py``)."""
        kwargs = {**self._connection_kwargs(), **self._ssl_kwargs(),
                  **connection_bound(self.reply_timeout())}
        max_connections = self.options.get("max_connections")
        if self.is_sentinel:
            return self._sentinel_client(kwargs, max_connections)
        url = self.url
        if self.is_unix_socket:
            if kwargs.get("ssl"):
                raise ImproperlyConfigured(
                    f"broker_use_ssl is set but broker_url 'plus+{maybe_sanitize_url(url)}' is a "
                    "Unix socket, which has no TLS: drop broker_use_ssl or use plus+rediss://.")
            url = unix_socket_url(url)
            kwargs = {k: v for k, v in kwargs.items() if k not in TCP_ONLY_OPTIONS}
        if kwargs.pop("ssl", False) and url.startswith("redis://"):
            url = "rediss://" + url[len("redis://"):]
        if max_connections is not None:
            kwargs["max_connections"] = max_connections
        return redis.Redis.from_url(url, **kwargs)

    def cluster_client(self) -> RedisCluster:
        """A new client of the Redis Cluster whose seed nodes the URLs name."""
        kwargs = {**self._connection_kwargs(), **self._ssl_kwargs()}
        # kombu splits the broker URL's ';' list into alternates; a URL given whole keeps it.
        urls = [*self.url.split(";"), *(u.removeprefix("plus+") for u in self.alternates)]
        seeds: list[ClusterNode] = []
        username = password = None
        for url in urls:
            parts = urlsplit(url)
            if parts.scheme not in CLUSTER_SCHEMES:
                continue
            if parts.path.strip("/") not in ("", "0"):
                raise ImproperlyConfigured(
                    f"broker_url 'plus+{maybe_sanitize_url(self.url)}': a Redis Cluster has "
                    "database 0 only; drop the '/<db>' of the URL.")
            seeds.append(ClusterNode(parts.hostname or "localhost", parts.port or 6379))
            username = unquote(parts.username) if parts.username else username
            password = unquote(parts.password) if parts.password else password
            if parts.scheme.startswith("rediss"):
                kwargs.setdefault("ssl", True)
        if self.options.get("max_connections") is not None:
            kwargs["max_connections"] = self.options["max_connections"]
        if self.options.get("socket_timeout") is None:
            # redis-py's cluster client sends a command again after a TimeoutError (up to its
            # retry count): a script whose reply is only slow would run twice. No default
            # reply bound there (None: redis-py 8's own default is 5 s); keepalives still
            # fail a dead link.
            kwargs["socket_timeout"] = None
        return RedisCluster(startup_nodes=seeds, username=username, password=password,
                            **kwargs)

    def _sentinel_client(self, kwargs: dict[str, Any], max_connections: Any) -> redis.Redis:
        from redis.sentinel import Sentinel, SentinelManagedSSLConnection

        master_name = self.options.get("master_name")
        if not master_name:
            raise ImproperlyConfigured(
                f"broker_url 'plus+{maybe_sanitize_url(self.url)}': a Sentinel store needs "
                "the master's name: broker_transport_options={'master_name': 'mymaster'}.")
        sentinels, db, username, password = self._sentinel_addresses()
        ssl = kwargs.pop("ssl", False)
        master_kwargs = dict(kwargs, db=db, username=username, password=password)
        if ssl:
            master_kwargs["connection_class"] = SentinelManagedSSLConnection
        if max_connections is not None:
            master_kwargs["max_connections"] = max_connections
        sentinel = Sentinel(sentinels, min_other_sentinels=int(
                                self.options.get("min_other_sentinels") or 0),
                            sentinel_kwargs=self.options.get("sentinel_kwargs"), **kwargs)
        return sentinel.master_for(str(master_name), redis_class=redis.Redis, **master_kwargs)

    def _sentinel_addresses(
            self) -> tuple[list[tuple[str, int]], int, str | None, str | None]:
        urls: Sequence[str] = [u.removeprefix("plus+") for u in self.alternates] or [self.url]
        sentinels: list[tuple[str, int]] = []
        db, username, password = 0, None, None
        for url in urls:
            parts = urlsplit(url)
            if parts.scheme != "sentinel":
                continue
            sentinels.append((parts.hostname or "localhost", parts.port or 26379))
            if parts.path.strip("/"):
                db = int(parts.path.strip("/"))
            username = unquote(parts.username) if parts.username else username
            password = unquote(parts.password) if parts.password else password
        return sentinels, db, username, password


def unix_socket_url(url: str) -> str:
    """redis-py's ``unix://`` form of kombu's ``redis+socket:///path?virtual_host=N``."""
    parts = urlsplit(url)
    query = "&".join(("db=" + pair.partition("=")[2]) if pair.startswith("virtual_host=") else pair
                     for pair in parts.query.split("&") if pair)
    return f"unix://{parts.path}" + (f"?{query}" if query else "")


def from_kombu(url: str, connection: Any) -> RedisConnect:
    """The store's connection settings from a kombu ``Connection`` (the broker's)."""
    if connection is None:
        return RedisConnect(url)
    return RedisConnect(url, alternates=tuple(getattr(connection, "alt", None) or ()),
                        options=dict(connection.transport_options or {}),
                        ssl=getattr(connection, "ssl", None))
