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
from functools import cached_property
from typing import Any

import redis
from celery.exceptions import ImproperlyConfigured
from kombu.transport import TRANSPORT_ALIASES, virtual
from kombu.utils.url import maybe_sanitize_url

from celery_plus import settings
from celery_plus.leases import process_keeper as keeper
from celery_plus.leases.holdings import Holdings, holdings_for
from celery_plus.model.store import Backend
from celery_plus.runtime.helper_threads import green_patched, native_ident
from celery_plus.runtime.worker_state import worker_stopping
from celery_plus.stores.registry import open_store
from celery_plus.transport.channel import Channel, is_transient
from celery_plus.transport.channel import Channel as PlusChannel
from celery_plus.transport.envelopes import read_transient
from celery_plus.transport.event_loop import LoopDriver
from celery_plus.transport.legacy import LegacyQueues
from celery_plus.transport.transient import TransientQueues

logger = logging.getLogger("celery_plus.transport")

#: Longest idle wait while kombu lists are consumed (legacy queues, plain workers' replies):
#: they have no wake-ups, so they are polled (plain Celery workers keep their blocking pops).
LEGACY_POLL_S = 0.1
#: Longest wait while every prefetch slot is taken (a freed slot ends it sooner).
BUSY_WAIT_S = 0.05
#: Shortest wait for a scheduled job about to fall due.
DUE_WAIT_S = 0.005
#: While claims keep bringing jobs, transient queues (remote control, replies) are popped at
#: most this often instead of on every turn; an idle loop's store wait returns their
#: messages as they come.
TRANSIENT_BUSY_POLL_S = 0.02


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
        # A Redis Cluster store whose nodes cannot be reached or whose slots are not covered.
        redis.exceptions.RedisClusterException,
    )
    channel_errors = (  # type: ignore[assignment]
        *virtual.Transport.channel_errors, redis.exceptions.ResponseError,
    )
    implements = virtual.Transport.implements.extend(
        asynchronous=True,  # event_loop.py: a worker runs Celery's asynloop on it
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
        #: The store's identity: what this process holds there outlives this connection.
        self.store = (url, self.config.key_prefix, self.config.pg_schema)
        self.holdings: Holdings = holdings_for(self.store, self.config.visibility_timeout)
        self._backend = open_store(url, self.config, client)
        #: Under green patching: the OS thread owning ``_backend``, and other threads' own.
        self._owner_thread = native_ident() if green_patched() else None
        self._thread_backends: dict[int, Backend] = {}
        self.legacy = make_legacy(url, self.config, options)
        self.worker_id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._keeper: keeper.TransportKeeper | None = None
        self._next_due_at: float | None = None
        self._loop_driver: LoopDriver | None = None
        #: Whether the last claim brought jobs, and when transient queues are next popped
        #: while claims do (``TRANSIENT_BUSY_POLL_S``).
        self._jobs_flowing = False
        self._transient_due = 0.0

    @cached_property
    def transient(self) -> TransientQueues:
        """Which queues are transient (declared so here, or marked in the store)."""
        return TransientQueues(lambda: self.backend)

    def driver_version(self) -> str:
        return "celery-plus"

    def as_uri(self, uri: str, include_password: bool = False, mask: str = "**") -> str:
        return "plus+" + (uri if include_password else maybe_sanitize_url(uri, mask))

    @property
    def backend(self) -> Backend:
        """The store.

        Under gevent/eventlet each OS thread gets a backend of its own: the lease keeper is
        a real OS thread (``runtime/helper_threads.py``), and a green socket or lock belongs to the
        thread whose hub made it.
        """
        backend = self._backend
        if self._owner_thread is None or native_ident() == self._owner_thread:
            return backend
        ident = native_ident()
        found = self._thread_backends.get(ident)
        if found is None:
            found = self._thread_backends[ident] = self.new_backend()
        return found

    def establish_connection(self) -> Any:
        """Connect only once the store answers: a store that is down raises one of
        ``connection_errors`` here, so Celery says "Cannot connect to plus+…: … Trying again
        in N seconds…" instead of "Connected…" then "Connection to broker lost" in a loop."""
        self.backend.connect()
        return super().establish_connection()

    def new_backend(self) -> Backend:
        """Another backend on this transport's store (the lease keeper's own connection)."""
        return open_store(self.url, self.config, self.client)

    def start_keeper(self) -> None:
        """Have the store's lease keeper renew this process's claims (once per connection)."""
        if self._keeper is None:
            self._keeper = keeper.attach(self)

    def note_next_due(self, seconds: float | None) -> None:
        """Remember when the next scheduled job is due, to wake for it on time."""
        self._next_due_at = None if seconds is None else time.monotonic() + seconds

    def register_with_event_loop(self, connection: Any, loop: Any) -> None:
        """Consume on Celery's event loop (``event_loop.py``) instead of ``drain_events``."""
        self._stop_loop_driver()
        self._loop_driver = LoopDriver(self, loop)
        self._loop_driver.start()
        logger.info("celery-plus: consuming on Celery's event loop")

    def _stop_loop_driver(self) -> None:
        driver, self._loop_driver = self._loop_driver, None
        if driver is not None:
            driver.stop()

    def drain_events(  # type: ignore[override]
        self, connection: Any, timeout: float | None = None
    ) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        poll = self.config.poll_interval
        while True:
            if self._drain_ready():
                return
            wait = poll if deadline is None else min(poll, deadline - time.monotonic())
            durable, transient, wait, _busy = self._wait_plan(wait)
            if wait <= 0 or worker_stopping():
                # Under gevent/eventlet this loop may never have blocked on a green socket
                # (SQLite): yield once, or the greenlet that ends the loop never runs.
                time.sleep(0)
                raise TimeoutError()
            if not durable and not transient:
                time.sleep(wait)
                continue
            hit = self.backend.wait(durable, transient, wait)
            if hit is not None and hit[0] == "transient" and hit[2] is not None:
                message = read_transient(hit[2], hit[1])
                if message is not None:
                    self._deliver(message, hit[1])
                    return

    def _wait_plan(self, wait: float) -> tuple[list[str], list[str], float, bool]:
        """What the next store wait watches, and for how long (at most ``wait``).

        Returns the durable queues with a free prefetch slot, the transient queues, the
        timeout, and whether some channel is full (capacity frees as other threads ack, so
        the wait is short). Both consuming loops (``drain_events``, ``event_loop.py``) use it.
        """
        if self._next_due_at is not None:
            wait = min(wait, max(self._next_due_at - time.monotonic(), DUE_WAIT_S))
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
            wait = min(wait, BUSY_WAIT_S)
        if legacy:
            wait = min(wait, LEGACY_POLL_S)
        return durable, transient, wait, busy

    def renew_transient(self) -> None:
        """Renew the transient bindings of every live channel (throttled per channel)."""
        for channel in self._live_channels():
            channel.renew_transient()

    def _live_channels(self) -> list[PlusChannel]:
        return [c for c in list(self.channels) if c is not None and not c.closed]

    def _drain_ready(self, transient_watched: bool = False) -> int:
        """Deliver what every channel has ready; the number of messages delivered.

        ``transient_watched``: a store wait in flight watches every transient queue consumed
        here (``event_loop.py``), so popping them too would only cost a round trip: the wait
        returns their next message itself."""
        now = time.monotonic()
        transient = not transient_watched and (not self._jobs_flowing
                                               or now >= self._transient_due)
        delivered = jobs = 0
        for channel in self._live_channels():
            count, claimed = channel.drain_ready(transient)
            delivered += count
            if claimed is not None:
                jobs += claimed
                self._jobs_flowing = claimed > 0
        if transient:  # none found: wait a while; some found: look again next turn
            self._transient_due = now + (TRANSIENT_BUSY_POLL_S if delivered == jobs else 0.0)
        return delivered

    def close_connection(self, connection: Any) -> None:
        self._stop_loop_driver()
        if self._keeper is not None:
            keeper.detach(self._keeper, self)
            self._keeper = None
        try:
            super().close_connection(connection)
        finally:
            if self.legacy is not None:
                self.legacy.close()
            for backend in [self._backend, *self._thread_backends.values()]:
                backend.close()


def register() -> None:
    """Make ``plus+<url>`` broker URLs resolve to this transport."""
    TRANSPORT_ALIASES.setdefault("plus", "celery_plus.transport:Transport")


__all__ = ["Channel", "Transport", "is_transient", "make_legacy", "register"]
