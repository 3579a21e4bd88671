"""Extensions on a broker that is not ``plus+...``: the coordination store.

An app whose broker is RabbitMQ (``amqp://``) or plain Redis (``redis://``) gets uniqueness
windows, per-key concurrency and dead letters by naming a coordination store,
``plus_coordination_url`` (Redis or PostgreSQL). The store is a durable-transport store used
beside the broker: each message of a task with extension options is recorded there as a job
(``sender``), a worker claims that job by id before running the delivery and settles it when
the delivery ends (``gate``), and the admin works on those records (``admin``). Every rule —
holds and windows, slots, leases and recovery, dead-letter details — is the durable store's own
operation; the guarantees that change (the broker and the store are two systems) are in
``docs/coordination.md``.
"""

from __future__ import annotations

from celery_plus.coordination.coordinator import (
           COORDINATED,
           DURABLE,
           PLAIN,
           Coordinator,
           check_worker,
           coordinator_for,
           mode,
           tasks_with_extensions,
)

__all__ = ["COORDINATED", "DURABLE", "PLAIN", "Coordinator", "check_worker", "coordinator_for",
           "mode", "tasks_with_extensions"]
