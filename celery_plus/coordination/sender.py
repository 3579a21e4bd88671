"""The send path on a non-plus broker: record the job, deciding uniqueness, then publish.

``celery_plus.Celery``'s AMQP helper wraps Celery's task sender with :func:`coordinated_sender`.
In coordinated mode a message that carries the ``plus`` extension header is handed to the
broker through a :class:`RecordingProducer`: its ``publish`` serializes the message once,
stores it as a job in the coordination store (uniqueness decided there, atomically, by the
durable transport's own publish) and only then publishes the same bytes to the broker. A
duplicate is not published; the outcome goes where the app's ``send_task`` reads it
(``last_publish``), so ``.deduplicated`` / ``DuplicateTask`` work as on the durable transport.
Every other message, and every message of a ``plus+`` broker, takes Celery's sender unchanged.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from kombu.serialization import dumps as serialize

from celery_plus.coordination import envelope
from celery_plus.coordination.coordinator import (
    COORDINATED,
    DURABLE,
    Coordinator,
    coordinator_for,
    mode,
)
from celery_plus.transport.publishing import job_from_message, last_publish

logger = logging.getLogger("celery_plus.coordination")

Sender = Callable[..., Any]


def _has_extensions(options: dict[str, Any]) -> bool:
    return "plus" in (options.get("headers") or ())


def coordinated_sender(app: Any, send: Sender) -> Sender:
    """Celery's task sender ``send`` as the app's mode needs it (see the module docstring)."""
    current = mode(app)
    if current == DURABLE:
        return send
    if current != COORDINATED:
        return _warning_sender(app, send)
    coordinator = coordinator_for(app)
    assert coordinator is not None

    def send_task_message(producer: Any, name: str, message: Any, **options: Any) -> Any:
        if not _has_extensions(options):
            return send(producer, name, message, **options)
        return send(RecordingProducer(producer, coordinator), name, message, **options)

    return send_task_message


def _warning_sender(app: Any, send: Sender) -> Sender:
    """A plain-mode sender that says once per task that its extension options do nothing."""
    warned: set[str] = set()

    def send_task_message(producer: Any, name: str, message: Any, **options: Any) -> Any:
        if name not in warned and _has_extensions(options):
            warned.add(name)
            logger.warning(
                "celery-plus: task %s declares extension options (unique, concurrency, ...) "
                "but broker_url is not a plus+... store and plus_coordination_url is not set: "
                "they are not enforced. Set plus_coordination_url (docs/coordination.md).", name)
        return send(producer, name, message, **options)

    return send_task_message


class RecordingProducer:
    """A producer that records each message as a job in the coordination store first.

    Everything but ``publish`` is the wrapped producer's (Celery's retry path revives its
    connection). A publish that Celery retries records the job again: the store's publish is
    idempotent per task id.
    """

    def __init__(self, producer: Any, coordinator: Coordinator) -> None:
        self._producer = producer
        self._coordinator = coordinator

    def __getattr__(self, name: str) -> Any:
        return getattr(self._producer, name)

    def publish(self, body: Any, routing_key: str | None = None, exchange: Any = None,
                headers: dict[str, Any] | None = None, serializer: str | None = None,
                declare: Any = None, **kwargs: Any) -> Any:
        headers = {} if headers is None else headers
        content_type, content_encoding, data = serialize(
            body, serializer=serializer or self._producer.serializer)
        payload = data.encode(content_encoding) if isinstance(data, str) else bytes(data)
        queues = [q for q in declare or () if getattr(q, "name", None)]
        queue = queues[0].name if queues else (routing_key or "")
        job = job_from_message(queue, envelope.build(
            payload, content_type, content_encoding, headers, kwargs, exchange,
            routing_key or ""), self._coordinator.config.max_deliveries)
        outcome = self._coordinator.publish(job)
        last_publish.set(outcome)
        if not outcome.accepted:
            return None
        try:
            return self._producer.publish(
                payload, routing_key=routing_key, exchange=exchange, headers=headers,
                content_type=content_type, content_encoding=content_encoding,
                declare=declare, **kwargs)
        except BaseException:
            # The broker never got it: without this the job would hold its key for nothing.
            self._coordinator.withdraw(job.id)
            raise
