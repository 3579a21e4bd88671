"""Legacy queues of a mixed deployment: task queues left in kombu's native Redis layout.

With ``plus_durable_queues`` set, the ``plus`` channel keeps its durable path for the listed
queues and hands every other task queue to an embedded kombu Redis channel on the legacy
server (``plus_legacy_url``, default the ``plus+redis://`` server itself), configured by the
same ``broker_transport_options`` plain Celery used. Publishes, pops, acks, rejects,
purges and sizes of legacy queues are then exactly kombu's (LPUSH / RPOP per priority list,
the ``unacked`` hash and its visibility-timeout restore), so plain Celery workers and
clients share those queues with celery-plus ones.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Mapping
from typing import Any

import kombu
from kombu.utils.json import loads

from celery_plus.model.store import Backend, JobStore, Settle

logger = logging.getLogger("celery_plus.transport")

#: Where a legacy message that is not a kombu envelope is parked before it is dead-lettered
#: (see :func:`dead_letter_raw`).
MALFORMED_SUFFIX = ".malformed"


def kombu_options(transport_options: Mapping[str, Any] | None) -> dict[str, Any]:
    """The transport options meant for kombu's Redis transport (no ``plus_*``)."""
    return {k: v for k, v in (transport_options or {}).items() if not k.startswith("plus_")}


class LegacyQueues:
    """The connection to the legacy server, shared by the channels of one transport."""

    def __init__(self, url: str, durable: frozenset[str],
                 transport_options: Mapping[str, Any] | None = None) -> None:
        self.url = url
        self.durable = durable
        self.connection = kombu.Connection(url, transport_options=kombu_options(
            transport_options))

    def channel(self) -> LegacyChannel:
        return LegacyChannel(self.connection.channel())

    def close(self) -> None:
        self.connection.release()


class LegacyChannel:
    """One kombu Redis channel serving the legacy queues of one ``plus`` channel.

    Its QoS is kombu's: a delivery is recorded in the ``unacked`` hash when taken, removed
    on ack, put back on reject(requeue) and at close, and restored by any kombu consumer
    once it is older than the layout's ``visibility_timeout``.
    """

    def __init__(self, channel: Any) -> None:
        self.channel = channel
        self._restored_at = time.monotonic()

    def put(self, queue: str, message: dict[str, Any]) -> None:
        self.channel._put(queue, message)

    def pop(self, queue: str) -> bytes | None:
        """The oldest message of the highest priority step, as raw bytes (None if empty)."""
        chan = self.channel
        with chan.conn_or_acquire() as client:
            for step in chan.priority_steps:
                item = client.rpop(chan._q_for_pri(queue, step))
                if item is not None:
                    return item if isinstance(item, bytes) else str(item).encode()
        return None

    def append(self, message: Any, tag: str) -> None:
        self.channel.qos.append(message, tag)

    def settle(self, tag: str, action: str) -> None:
        """requeue: put the message back; reject: drop it; ack / fail: forget it (kombu's
        semantics: a failed task's message is acked, not dead-lettered)."""
        qos = self.channel.qos
        if action in ("requeue", "reject"):
            qos.reject(tag, requeue=action == "requeue")
        else:
            qos.ack(tag)

    def restore_visible(self) -> None:
        """Put back deliveries held past the visibility timeout (what kombu consumers do)."""
        chan = self.channel
        now = time.monotonic()
        if now - self._restored_at < chan.unacked_restore_interval:
            return
        self._restored_at = now
        try:
            chan.qos.restore_visible(num=chan.unacked_restore_limit, interval=1)
        except Exception as exc:  # a failed sweep is retried at the next interval
            logger.warning("celery-plus: could not restore legacy unacked messages: %r", exc)

    def size(self, queue: str) -> int:
        return int(self.channel._size(queue))

    def purge(self, queue: str) -> int:
        return int(self.channel._purge(queue))

    def declare(self, queue: str, **kwargs: Any) -> None:
        """Let kombu know the queue's arguments (an ``x-expires`` makes its binding expire)."""
        self.channel._new_queue(queue, **kwargs)

    def put_fanout(self, exchange: str, message: dict[str, Any], routing_key: str) -> None:
        """Broadcast the way kombu does (PUBLISH): plain Celery workers hear it too."""
        self.channel._put_fanout(exchange, message, routing_key)

    def bind(self, exchange: str, routing_key: str, pattern: str, queue: str) -> None:
        """Record the binding in kombu's table too, so kombu routes restores and publishes."""
        self.channel._queue_bind(exchange, routing_key, pattern, queue)

    def delete(self, queue: str, exchange: str, routing_key: str, pattern: str) -> None:
        self.channel._delete(queue, exchange, routing_key, pattern)

    def close(self) -> None:
        self.channel.close()  # kombu restores the deliveries still held


def parse_envelope(raw: bytes | str) -> dict[str, Any]:
    """A kombu message envelope from a list entry; ``ValueError`` if it is not one."""
    try:
        message = loads(raw.decode() if isinstance(raw, bytes) else raw)
    except (TypeError, ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"not JSON: {exc}") from exc
    if not isinstance(message, dict) or not isinstance(message.get("properties"), dict):
        raise ValueError("not a kombu message envelope (no 'properties')")
    return message


def dead_letter_raw(backend: Backend, queue: str, raw: bytes | str, reason: str,
                    error: str, worker_id: str, job_id: str | None = None) -> str:
    """Record ``raw`` (bytes kept exactly) as a dead letter of ``queue``; its job id.

    Through the store interface, on every backend: the bytes are stored as a job of the
    side queue ``{queue}.malformed`` (one atomic publish), then claimed and failed. A crash
    in between leaves an enqueued job there, which :func:`fail_parked` finishes later.
    """
    job_id = job_id or f"malformed-{uuid.uuid4()}"
    side = queue + MALFORMED_SUFFIX
    backend.push_raw(side, job_id, raw)
    fail_parked(backend, side, reason, error, worker_id)
    return job_id


def fail_parked(backend: JobStore, side_queue: str, reason: str, error: str,
                worker_id: str) -> int:
    """Dead-letter every job waiting in a ``.malformed`` side queue; how many."""
    failed = 0
    while True:
        claimed = backend.claim([side_queue], worker_id, 100).claims
        if not claimed:
            return failed
        detail = {"reason": reason, "exc_type": "MalformedMessage", "exc_message": error}
        backend.settle([Settle(c.job_id, c.token, "fail", detail) for c in claimed])
        failed += len(claimed)
