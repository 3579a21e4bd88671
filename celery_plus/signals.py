"""Celery's signals, plus the ones celery-plus adds.

New signals (all sent with ``sender`` = the task name when known, else ``None``):

``task_deduplicated(task_id, holder_id, unique_key)``
    A publish coalesced into the job holding ``unique_key``; ``task_id`` is the id the
    duplicate would have had. Sent by the publishing process.
``task_published(task_id, deduplicated, holder_id)``
    The store answered a publish on a ``plus+`` broker: ``deduplicated`` is True when nothing
    new was stored (the publish coalesced into ``holder_id``, or was fenced). Sent by the
    publishing process while the publish is under way (between Celery's ``before_task_publish``
    and ``after_task_publish``: OpenTelemetry's publish span is still open); not sent for a
    publish deferred to a transaction or a batch.
``task_concurrency_blocked(task_id)``
    A claim found the job's concurrency group full and parked it. Sent by the worker.
``task_dead_lettered(task_id, reason)``
    A job ended in the dead-letter store (reason: ``task failed``, ``rejected``,
    ``delivery limit``, ``malformed message``, ...). Sent by the worker that settled it.
``task_recovered(task_id, outcome)``
    An expired lease was recovered; outcome is ``requeued``, ``coalesced`` or ``dead``.
    Sent by the worker that ran the recovery.
``task_lease_lost(task_id)``
    A heartbeat found that this worker's claim was taken over (its lease expired and was
    recovered); the eventual ack of that delivery will be a no-op.
"""

from __future__ import annotations

from celery.signals import *  # noqa: F403
from celery.signals import __all__ as _celery_all
from celery.utils.dispatch import Signal

task_deduplicated = Signal(
    name="task_deduplicated", providing_args={"task_id", "holder_id", "unique_key"}
)
task_published = Signal(
    name="task_published", providing_args={"task_id", "deduplicated", "holder_id"}
)
task_concurrency_blocked = Signal(name="task_concurrency_blocked", providing_args={"task_id"})
task_dead_lettered = Signal(name="task_dead_lettered", providing_args={"task_id", "reason"})
task_recovered = Signal(name="task_recovered", providing_args={"task_id", "outcome"})
task_lease_lost = Signal(name="task_lease_lost", providing_args={"task_id"})

__all__ = [
    *_celery_all,
    "task_concurrency_blocked",
    "task_dead_lettered",
    "task_deduplicated",
    "task_lease_lost",
    "task_published",
    "task_recovered",
]
