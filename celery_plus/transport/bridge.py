"""The mixed-deployment bridge of one ``plus`` channel: what goes to kombu's Redis layout.

With ``plus_durable_queues`` set, the task queues not listed are *legacy* queues, served by an
embedded kombu Redis channel (``transport/legacy.py``) with kombu's own semantics, and
the reply queues of remote control are *bridged*: plain Celery workers answer into kombu's
layout, celery-plus workers into the store. :class:`LegacyBridge` decides which queues those
are and routes to kombu what concerns them: publishes and broadcasts, declarations, bindings,
deletes, purges and sizes; the pops of legacy queues (fair across queues, within the prefetch
window) and of bridged replies; kombu's bookkeeping of legacy deliveries (its ``unacked``
hash, their acks and rejects, given back when the channel closes); and the dead-lettering of
a legacy entry that is no kombu message. Without ``plus_durable_queues`` no queue is legacy or
bridged and the channel never calls into kombu.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from queue import Empty
from typing import TYPE_CHECKING, Any

from celery_plus.runtime.helper_threads import native_lock
from celery_plus.transport.failures import MALFORMED
from celery_plus.transport.legacy import LegacyChannel, dead_letter_raw, parse_envelope
from celery_plus.transport.rotation import rotate

if TYPE_CHECKING:
    from celery_plus.transport.host import Host

logger = logging.getLogger("celery_plus.transport")


class LegacyBridge:
    """Routes one channel's legacy queues and bridged replies to kombu (see the module doc)."""

    def __init__(self, transport: Host, is_transient: Callable[[str], bool]) -> None:
        self._transport = transport
        self._is_transient = is_transient
        #: plus_durable_queues (None: every task queue is durable, no legacy queue).
        self.durable: frozenset[str] | None = transport.config.durable_queues
        self._channel: LegacyChannel | None = None
        #: Tags of legacy messages being delivered, until the channel's QoS takes them.
        self._popped: set[str] = set()
        #: Tags of legacy deliveries taken and not settled yet (acks come from any thread).
        self._held: set[str] = set()
        self._lock = native_lock()
        self._order: list[str] = []

    # -- which queues ------------------------------------------------------------------
    @property
    def mixed(self) -> bool:
        """True in a mixed deployment (``plus_durable_queues`` set)."""
        return self.durable is not None

    def is_durable(self, queue: str) -> bool:
        """True for a task queue stored in the durable store."""
        return (self.durable is None or queue in self.durable) and not self._is_transient(queue)

    def is_legacy(self, queue: str) -> bool:
        """True for a task queue left in kombu's Redis layout (``plus_durable_queues``)."""
        durable = self.durable
        return durable is not None and queue not in durable and not self._is_transient(queue)

    def bridges(self, queue: str) -> bool:
        """True for a reply queue of remote control in a mixed deployment: plain Celery
        workers answer into kombu's layout, celery-plus workers into the store."""
        return self.durable is not None and queue.endswith(".pidbox") and ".reply." in queue

    def in_kombu(self, queue: str) -> bool:
        """True for a queue kombu has a binding table entry for (legacy or bridged)."""
        return self.is_legacy(queue) or self.bridges(queue)

    def legacy_queues(self, queues: list[str]) -> list[str]:
        return [q for q in queues if self.is_legacy(q)] if self.mixed else []

    def polls_kombu(self, queues: list[str]) -> bool:
        """True if consuming ``queues`` reads kombu lists, which have no wake-ups."""
        return self.mixed and any(self.in_kombu(q) for q in queues)

    @property
    def channel(self) -> LegacyChannel:
        """The kombu Redis channel of the legacy queues (opened on first use)."""
        if self._channel is None:
            queues = self._transport.legacy
            if queues is None:  # pragma: no cover - nothing is legacy without it
                raise RuntimeError("no legacy queues: plus_durable_queues is not set")
            self._channel = queues.channel()
        return self._channel

    # -- publishing and queue administration -------------------------------------------
    def put(self, queue: str, message: dict[str, Any]) -> None:
        self.channel.put(queue, message)

    def put_fanout(self, exchange: str, message: dict[str, Any], routing_key: str) -> None:
        """Broadcast into kombu's layout too: plain Celery workers listen there."""
        if self.mixed:
            self.channel.put_fanout(exchange, message, routing_key)

    def declare(self, queue: str, **kwargs: Any) -> None:
        if self.bridges(queue):
            self.channel.declare(queue, **kwargs)

    def bind(self, exchange: str, routing_key: str, pattern: str, queue: str) -> None:
        """kombu routes by its own table: restores, plain clients, plain workers' replies."""
        if self.in_kombu(queue):
            self.channel.bind(exchange, routing_key, pattern, queue)

    def unbind(self, queue: str, exchange: str, routing_key: str, pattern: str) -> None:
        if self.in_kombu(queue):
            self.channel.delete(queue, exchange, routing_key, pattern)

    def purge(self, queue: str) -> int:
        return self.channel.purge(queue)

    def size(self, queue: str) -> int:
        return self.channel.size(queue)

    # -- consuming ---------------------------------------------------------------------
    def pop_reply(self, queue: str) -> bytes | None:
        """A plain Celery worker's reply waiting in a bridged queue (None: none, or not
        bridged)."""
        return self.channel.pop(queue) if self.bridges(queue) else None

    def deliver(self, queues: list[str], has_room: Callable[[], bool]) -> int:
        """Pop and deliver one message from each legacy queue among ``queues`` while
        ``has_room()``; how many were delivered."""
        legacy = self.legacy_queues(queues)
        if not legacy or not has_room():
            return 0
        self.channel.restore_visible()
        delivered = 0
        for queue in rotate(legacy, self._order):
            if not has_room():
                break
            raw = self.channel.pop(queue)
            if raw is not None:
                self._deliver_raw(queue, raw)
                delivered += 1
        return delivered

    def _deliver_raw(self, queue: str, raw: bytes) -> None:
        message = self._message_of(queue, raw)
        if message is None:
            return
        try:
            self._transport._deliver(message, queue)
        finally:  # not taken by the QoS: a no-ack consumer
            self._popped.discard(message["properties"]["delivery_tag"])

    def get(self, queue: str) -> dict[str, Any]:
        """The next message of legacy ``queue`` for ``basic_get``; ``Empty`` if none."""
        raw = self.channel.pop(queue)
        message = None if raw is None else self._message_of(queue, raw)
        if message is None:
            raise Empty()
        return message

    def _message_of(self, queue: str, raw: bytes) -> dict[str, Any] | None:
        """The kombu message of a legacy entry (consumed or fetched alike), with a delivery
        tag (kombu's own if it has one) noted as popped; None for an entry that is no kombu
        message (dead-lettered)."""
        try:
            message = parse_envelope(raw)
        except ValueError as exc:
            self.dead_letter(queue, raw, exc)
            return None
        props = message["properties"]
        props["delivery_tag"] = props.get("delivery_tag") or str(uuid.uuid4())
        self._popped.add(props["delivery_tag"])
        return message

    def got(self) -> None:
        """A ``basic_get`` ended: a no-ack get of a legacy message leaves its tag popped."""
        self._popped.clear()

    def popped(self, tag: Any) -> bool:
        """True while the legacy message tagged ``tag`` is being delivered."""
        return tag in self._popped

    def dead_letter(self, queue: str, raw: bytes | str, exc: BaseException) -> None:
        """A legacy entry that is no kombu message: kept, with its bytes, as a dead letter."""
        transport = self._transport
        job_id = dead_letter_raw(transport.backend, queue, raw, MALFORMED, str(exc),
                                 transport.worker_id)
        logger.error("celery-plus: dead-lettered a malformed message of legacy queue %s as "
                     "job %s: %s", queue, job_id, exc)

    # -- legacy deliveries -------------------------------------------------------------
    def take(self, message: Any, tag: str) -> bool:
        """Record a delivery in kombu's ``unacked`` hash if it is a legacy one being
        delivered; True if it was."""
        if tag not in self._popped:
            return False
        self._popped.discard(tag)
        self.channel.append(message, tag)
        with self._lock:
            self._held.add(tag)
        return True

    def settle(self, tag: str, action: str) -> bool:
        """Settle a legacy delivery the kombu way; True if ``tag`` was one."""
        with self._lock:
            if tag not in self._held:
                return False
            self._held.discard(tag)
        self.channel.settle(tag, action)
        return True

    def give_back(self) -> set[str]:
        """Put every unsettled legacy delivery back on its kombu list; their tags."""
        with self._lock:
            held, self._held = self._held, set()
        for tag in held:
            self.channel.settle(tag, "requeue")
        return held

    def close(self) -> None:
        channel, self._channel = self._channel, None
        if channel is not None:
            channel.close()
