"""The one registry of stores: which store serves a URL, and which admin serves a store.

Every store kind is one :class:`StoreKind` row: the URL schemes it serves, its backend class
and its admin class, named as ``module:Class`` so nothing is imported until it is used (a
store's driver, psycopg for one, is optional). :func:`open_store` replaces the transport's
scheme switch and :func:`admin_for` the admin's ``isinstance`` chain; a store added outside
this package registers itself with :func:`register_store`.

A backend class builds itself from a URL with its ``from_url(url, config, connection)``
class method, where each store's own URL rules live (Redis's TLS and Sentinel, PostgreSQL's
schema, SQLite's path).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from celery.exceptions import ImproperlyConfigured
from kombu.utils.url import maybe_sanitize_url

from celery_plus import settings
from celery_plus.model.admin import AdminStore, UnsupportedStore
from celery_plus.model.store import Backend


@dataclass(frozen=True)
class StoreKind:
    """One kind of store: its URL schemes, backend class and admin class (``module:Class``)."""

    schemes: tuple[str, ...]
    backend: str
    admin: str


_KINDS: list[StoreKind] = [
    StoreKind(("redis+cluster", "rediss+cluster"),
              "celery_plus.stores.redis.cluster:RedisClusterBackend",
              "celery_plus.stores.redis.cluster_admin:RedisClusterAdmin"),
    StoreKind(("redis", "rediss", "sentinel", "redis+socket", "socket"),
              "celery_plus.stores.redis.backend:RedisBackend",
              "celery_plus.stores.redis.admin:RedisAdmin"),
    StoreKind(("sqlite",),
              "celery_plus.stores.sqlite.backend:SQLiteBackend",
              "celery_plus.stores.sqlite.admin:SQLiteAdmin"),
    StoreKind(("postgresql", "postgres"),
              "celery_plus.stores.postgres.backend:PostgresBackend",
              "celery_plus.stores.postgres.admin:PostgresAdmin"),
    StoreKind(("memory",),
              "celery_plus.stores.memory.backend:MemoryBackend",
              "celery_plus.stores.memory.admin:MemoryAdmin"),
]


def register_store(kind: StoreKind) -> None:
    """Serve ``kind``'s schemes (and its backend's admin) ahead of the built-in stores."""
    _KINDS.insert(0, kind)


def schemes() -> tuple[str, ...]:
    """Every URL scheme a store serves (without ``plus+``)."""
    return tuple(scheme for kind in _KINDS for scheme in kind.schemes)


def _load(path: str) -> Any:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def open_store(url: str, config: settings.PlusConfig, connection: Any = None) -> Backend:
    """The store behind ``url`` (a broker URL without ``plus+``), not connected yet.

    ``connection``: the broker's kombu ``Connection``, whose options (``broker_use_ssl``,
    ``broker_transport_options``, Sentinel addresses) a Redis store uses as kombu's Redis
    transport does. A store that is down fails later, when it is first reached.
    """
    scheme = url.partition("://")[0]
    for kind in _KINDS:
        if scheme in kind.schemes:
            backend: Backend = _load(kind.backend).from_url(url, config, connection)
            return backend
    raise ImproperlyConfigured(
        f"broker_url 'plus+{maybe_sanitize_url(url)}': unsupported store {scheme!r}. "
        f"Use one of: {', '.join('plus+' + s + '://' for s in schemes())}.")


def admin_for(backend: Backend, *, owns_backend: bool = False) -> AdminStore:
    """The admin of ``backend``'s store (closing it closes the backend only if
    ``owns_backend``)."""
    names = {f"{cls.__module__}:{cls.__qualname__}" for cls in type(backend).__mro__}
    for kind in _KINDS:
        if kind.backend in names:
            factory: Callable[..., AdminStore] = _load(kind.admin)
            return factory(backend, owns_backend=owns_backend)
    raise UnsupportedStore(
        f"the admin does not support {type(backend).__name__} stores yet "
        f"(supported: {', '.join('plus+' + s + '://' for s in schemes())})")


def store_location(app: Any) -> tuple[str, settings.PlusConfig]:
    """``app``'s store URL (without ``plus+``) and its ``plus_*`` settings; ``app`` may be a
    Celery app or a ``plus+...`` URL. :class:`UnsupportedStore` for a broker that is not a
    plus store."""
    if isinstance(app, str):
        url = app
        if not url.startswith("plus+"):
            raise UnsupportedStore(
                f"{url!r} is not a celery-plus durable store URL (plus+redis://, "
                "plus+sqlite://, ...)")
        return url[len("plus+"):], settings.resolve({})
    conn = app.connection_for_read()
    try:
        if conn.transport_cls != "plus":
            raise UnsupportedStore(
                f"app {app.main!r} uses broker transport {conn.transport_cls!r}: the admin "
                "works on celery-plus durable stores (broker_url plus+redis://, "
                "plus+sqlite://, ...)")
        options = conn.transport_options or {}
        config = settings.resolve({k: v for k, v in options.items() if k.startswith("plus_")})
        url = conn.hostname or "redis://localhost:6379/0"
        return (url if "://" in url else f"redis://{url}"), config
    finally:
        conn.release()
