"""``celery-plus migrate-queue NAME --legacy-url amqp://…``: move a RabbitMQ queue's messages
into the durable store.

One batch at a time, on one AMQP channel:

1. take up to ``batch_size`` messages with ``basic_get`` (manual ack): RabbitMQ keeps each
   one for this connection, unacknowledged;
2. store them: each as the kombu envelope a worker would have received (body byte for byte,
   headers, properties, exchange and routing key), dropped as a copy if the store already has
   its task id (any state), the others in one ``publish_many``;
3. only then ack them (one ``basic_ack`` with ``multiple``, up to the batch's last tag).

A crash before 3 closes the connection and RabbitMQ puts the batch back in the queue; the next
run finds those task ids in the store and only acks them. So nothing is lost and a message
moved twice is stored once. The store's ``publish`` would *replace* a job of the same id, so
the copy check before it is what coalesces: it holds because one run per queue moves at a
time (:class:`StoreLock`, the store's lease of role ``migrate-queue:NAME``).

Messages a consumer holds unacknowledged (a plain Celery worker still attached: prefetched and
ETA tasks) stay with it; they come back to the queue when it stops, and a re-run moves them.
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass, field

import kombu
from kombu.message import Message
from kombu.utils.json import dumps

from celery_plus.coordination import envelope
from celery_plus.model.store import Backend
from celery_plus.queue_migration.parts import (
    LOCK_TTL_MS,
    MigrateOptions,
    MigrationError,
    Progress,
    Tally,
    _dead_here,
    _Pace,
    existing_ids,
    item_of,
)


@dataclass
class AmqpSource:
    """The RabbitMQ side: a kombu connection (``amqp://``) and the queue's name."""

    connection: kombu.Connection
    queue: str
    max_deliveries: int = 5

    def counts(self) -> tuple[int, int]:
        """(messages ready, consumers attached) of the queue; MigrationError if none."""
        try:
            _, ready, consumers = kombu.Queue(self.queue, no_declare=True).bind(
                self.connection.default_channel).queue_declare(passive=True)
        except self.connection.channel_errors as exc:
            raise MigrationError(f"RabbitMQ has no queue {self.queue!r} ({exc})") from exc
        return int(ready), int(consumers)


@dataclass
class StoreLock:
    """One move per queue at a time: the store's lease of role ``migrate-queue:QUEUE``,
    renewed per batch; a holder that is a dead process of this host is taken over."""

    backend: Backend
    queue: str
    holder: str = field(default_factory=lambda: f"{socket.gethostname()}:{os.getpid()}:"
                                                f"{uuid.uuid4().hex[:8]}")

    @property
    def role(self) -> str:
        return f"migrate-queue:{self.queue}"

    def acquire(self) -> None:
        if self.backend.lead(self.role, self.holder, LOCK_TTL_MS):
            return
        held = self.backend.role_holder(self.role)
        if held and _dead_here(held[0]):
            self.backend.resign(self.role, held[0])
            if self.backend.lead(self.role, self.holder, LOCK_TTL_MS):
                return
        raise MigrationError(
            f"another migrate-queue moves {self.queue!r} ({held[0] if held else 'gone'}; its "
            "lease lapses within a minute if that process died on another host). Wait for it "
            "to finish.")

    def renew(self) -> None:
        if not self.backend.lead(self.role, self.holder, LOCK_TTL_MS):
            raise MigrationError(f"lost the lease {self.role}: another migrate-queue took "
                                 "over; stopping (nothing is lost, re-run to resume)")

    def release(self) -> None:
        self.backend.resign(self.role, self.holder)


def migrate_amqp(source: AmqpSource, backend: Backend, options: MigrateOptions,
                 progress: Progress | None = None) -> Tally:
    """Move RabbitMQ queue ``options.queue`` into ``backend`` (a dry run only counts)."""
    ready, _ = source.counts()
    if options.dry_run:
        return Tally(planned=ready)
    lock = StoreLock(backend, options.queue)
    lock.acquire()
    try:
        tally = Tally(planned=ready)
        pace = _Pace(options.rate)
        report = progress or (lambda _stage, _tally: None)
        queue = kombu.Queue(options.queue, no_declare=True).bind(
            source.connection.default_channel)
        while batch := _take(queue, options.batch_size):
            tally.add(_store(source, backend, batch))
            _ack(batch)
            lock.renew()
            report("batch", tally)
            pace.took(len(batch))
        report("done", tally)
        return tally
    finally:
        lock.release()


def _take(queue: kombu.Queue, size: int) -> list[Message]:
    """Up to ``size`` messages of ``queue``, unacknowledged, oldest first."""
    batch: list[Message] = []
    while len(batch) < size and (message := queue.get(no_ack=False)) is not None:
        batch.append(message)
    return batch


def _store(source: AmqpSource, backend: Backend, batch: list[Message]) -> list[int]:
    """Publish the batch's messages the store does not have yet; (taken, moved, present,
    coalesced, bad)."""
    jobs = [item_of(source.queue, dumps(envelope.from_delivery(m)), source.max_deliveries).job
            for m in batch]
    present = existing_ids(backend, {job.id for job in jobs if job is not None})
    fresh, seen = [], set(present)
    for job in jobs:
        if job is not None and job.id not in seen:
            fresh.append(job)
            seen.add(job.id)
    outcomes = backend.publish_many(fresh) if fresh else []
    moved = sum(1 for outcome in outcomes if outcome.accepted)
    return [len(batch), moved, len(batch) - len(fresh), len(fresh) - moved, 0]


def _ack(batch: list[Message]) -> None:
    """Ack the whole batch (after the store committed it): one ``basic_ack`` up to its last
    delivery tag."""
    batch[-1].ack(multiple=True)


__all__ = ["AmqpSource", "StoreLock", "migrate_amqp"]
