"""The ``plus`` kombu transport: ``plus+redis://``, one backend per inner URL scheme.

kombu splits ``plus+<url>`` into the transport alias ``plus`` and ``<url>``; this transport
picks the backend from ``<url>``'s scheme. Durable semantics live in the backend; this module
only wires kombu's virtual transport to it (and, in a mixed deployment, to the legacy
queues' kombu Redis connection: ``legacy.py``).
"""

from __future__ import annotations

import logging
import os
import socket
import time
import uuid
from collections.abc import Iterable
from functools import cached_property
from typing import Any

import redis
from celery.exceptions import ImproperlyConfigured
from kombu.transport import TRANSPORT_ALIASES, virtual
from kombu.utils.url import maybe_sanitize_url

from .. import settings, signals
from .backend import Backend
from .channel import Channel, is_transient
from .channel import Channel as PlusChannel
from .keeper import LeaseKeeper
from .legacy import LegacyQueues
from .transient import TransientQueues

logger = logging.getLogger("celery_plus.transport")

SCHEMES = ("redis", "rediss", "sqlite", "postgresql")

#: Longest idle wait while kombu lists are consumed (legacy queues, plain workers' replies):
#: they have no wake-ups, so they are polled (plain Celery workers keep their blocking pops).
LEGACY_POLL_S = 0.1


def make_backend(url: str, config: settings.PlusConfig) -> Backend:
    scheme = url.partition("://")[0]
    options: dict[str, Any] = dict(
        prefix=config.key_prefix,
        lease_ms=int(config.visibility_timeout * 1000),
        backstop_ms=int(config.unique_backstop * 1000),
        retention=(
            int(config.completed_retention * 1000), config.completed_max,
            int(config.dead_letter_retention * 1000), config.dead_letter_max,
        ),
        maintenance_interval_ms=int(config.maintenance_interval * 1000),
    )
    if scheme in ("redis", "rediss"):
        from .redis_backend import RedisBackend

        return RedisBackend(url, **options)
    if scheme == "sqlite":
        from .sqlite_backend import SQLiteBackend

        return SQLiteBackend(url, **options)
    if scheme in ("postgresql", "postgres"):
        from .postgres_backend import PostgresBackend

        return PostgresBackend(url, schema=config.pg_schema, **options)
    raise ImproperlyConfigured(
        f"broker_url 'plus+{maybe_sanitize_url(url)}': unsupported store {scheme!r}. "
        f"Use one of: {', '.join('plus+' + s + '://' for s in SCHEMES)}."
    )


def make_legacy(url: str, config: settings.PlusConfig,
                transport_options: dict[str, Any]) -> LegacyQueues | None:
    """The legacy queues' connection of a mixed deployment (None without
    ``plus_durable_queues``)."""
    if config.durable_queues is None:
        return None
    legacy_url = config.legacy_url
    if legacy_url is None:
        if url.partition("://")[0] not in ("redis", "rediss"):
            raise ImproperlyConfigured(
                f"Setting plus_durable_queues={sorted(config.durable_queues)!r} on broker_url "
                f"'plus+{maybe_sanitize_url(url)}': the queues it does not list stay in "
                "kombu's Redis layout, and this store is not Redis. Set plus_legacy_url to "
                "the plain Celery broker (e.g. 'redis://localhost:6379/0'), or remove "
                "plus_durable_queues to make every queue durable."
            )
        legacy_url = url
    return LegacyQueues(legacy_url, config.durable_queues, transport_options)


def _worker_stopping() -> bool:
    """True once a Celery worker in this process was asked to shut down."""
    from celery.worker import state

    # Celery stores the exit code there: 0 (EX_OK) means "stop" too.
    flags = (state.should_stop, state.should_terminate)
    return any(flag is not None and flag is not False for flag in flags)


class Transport(virtual.Transport):
    """kombu transport whose task queues are durable job stores."""

    Channel = Channel
    can_parse_url = True
    driver_type = "plus"
    driver_name = "plus"
    polling_interval = None  # type: ignore[assignment]
    connection_errors = (  # type: ignore[assignment]
        *virtual.Transport.connection_errors,
        redis.exceptions.ConnectionError,
        redis.exceptions.TimeoutError,
    )
    channel_errors = (  # type: ignore[assignment]
        *virtual.Transport.channel_errors, redis.exceptions.ResponseError,
    )
    implements = virtual.Transport.implements.extend(
        asynchronous=False,
        exchange_type=frozenset(["direct", "topic", "fanout"]),
        heartbeats=False,
    )

    def __init__(self, client: Any, **kwargs: Any) -> None:
        super().__init__(client, **kwargs)
        options = client.transport_options or {}
        self.config = settings.resolve({k: v for k, v in options.items() if k.startswith("plus_")})
        url = client.hostname or "redis://localhost:6379/0"
        if "://" not in url:
            url = f"redis://{url}"
        self.url = url
        self.legacy = make_legacy(url, self.config, options)
        self.worker_id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._keeper: LeaseKeeper | None = None
        self._next_due_at: float | None = None

    @cached_property
    def backend(self) -> Backend:
        """The store, opened with the first channel: kombu builds a transport for as little
        as ``Connection(url).as_uri()`` (Celery's ``inspect conf`` and ``report`` do, to hide
        passwords), which must not connect to a store, let alone create a schema in it."""
        return make_backend(self.url, self.config)

    @cached_property
    def transient(self) -> TransientQueues:
        """Which queues are transient (declared so here, or marked in the store)."""
        return TransientQueues(lambda: self.backend)

    def driver_version(self) -> str:
        return "celery-plus"

    def as_uri(self, uri: str, include_password: bool = False, mask: str = "**") -> str:
        return "plus+" + (uri if include_password else maybe_sanitize_url(uri, mask))

    def start_keeper(self) -> None:
        if self._keeper is None:
            self._keeper = LeaseKeeper(self)
            self._keeper.start()

    def note_next_due(self, seconds: float | None) -> None:
        """Remember when the next scheduled job is due, to wake for it on time."""
        self._next_due_at = None if seconds is None else time.monotonic() + seconds

    def report_dead_letters(self, dead: Iterable[tuple[str, str]]) -> None:
        for job_id, reason in dead:
            logger.error("celery-plus: job %s dead-lettered (%s)", job_id, reason)
            signals.task_dead_lettered.send(sender=None, task_id=job_id, reason=reason)

    def drain_events(  # type: ignore[override]
        self, connection: Any, timeout: float | None = None
    ) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        poll = self.config.poll_interval
        while True:
            if self._drain_ready():
                return
            wait = poll if deadline is None else min(poll, deadline - time.monotonic())
            if self._next_due_at is not None:
                wait = min(wait, max(self._next_due_at - time.monotonic(), 0.005))
            if wait <= 0 or _worker_stopping():
                raise TimeoutError()
            durable: list[str] = []
            transient: list[str] = []
            busy = legacy = False
            for channel in self._live_channels():
                transient += channel.transient_queues
                if channel.wants_jobs():
                    durable += channel.durable_queues
                elif channel.durable_queues:
                    busy = True
                legacy = legacy or channel.polls_kombu()
            if busy:
                wait = min(wait, 0.05)  # capacity frees as other threads ack
            if legacy:
                wait = min(wait, LEGACY_POLL_S)
            if not durable and not transient:
                time.sleep(wait)
                continue
            hit = self.backend.wait(durable, transient, wait)
            if hit is not None and hit[0] == "transient" and hit[2] is not None:
                import json

                self._deliver(json.loads(hit[2]), hit[1])
                return

    def _live_channels(self) -> list[PlusChannel]:
        return [c for c in list(self.channels) if c is not None and not c.closed]

    def _drain_ready(self) -> int:
        return sum(channel.drain_ready() for channel in self._live_channels())

    def close_connection(self, connection: Any) -> None:
        if self._keeper is not None:
            self._keeper.stop()
            self._keeper = None
        try:
            super().close_connection(connection)
        finally:
            if self.legacy is not None:
                self.legacy.close()
            if "backend" in self.__dict__:
                self.backend.close()


def register() -> None:
    """Make ``plus+<url>`` broker URLs resolve to this transport, and workers on it hand tasks
    to a prefork pool without blocking (``prefork_gate.py``) and answer ``inspect scheduled``
    from the store (``control.py``)."""
    from .. import control, prefork_gate

    TRANSPORT_ALIASES.setdefault("plus", "celery_plus.transport:Transport")
    prefork_gate.install()
    control.install()


register()

__all__ = ["Channel", "Transport", "is_transient", "make_backend", "make_legacy", "register"]
