"""The admin of paused queues (docs/admin.md, "Pausing a queue"): list, pause, resume.

Through the store interface (``Backend.queue_pause`` / ``paused_queues``), the same on every
store: the pause is kept in the store, so it holds for every worker of the cluster and
survives restarts; the store's claim refuses a paused queue's jobs from the step on.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from celery_plus.admin.params import check_text
from celery_plus.model.store import Backend


@dataclass(frozen=True)
class QueuePause:
    """A queue's pause state after a pause or resume.

    ``acknowledged_ms``: the store's time of the step (ms since the epoch): no claim after
    it takes a job of a paused queue. ``paused_ms``: when the queue was first paused (None
    when it is not paused)."""

    queue: str
    paused: bool
    paused_ms: int | None
    acknowledged_ms: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _checked(queue: str) -> str:
    check_text("queue", queue)
    if not queue:
        raise ValueError("queue: a queue name is needed")
    return queue


def set_queue_paused(backend: Backend, queue: str, paused: bool) -> QueuePause:
    """Pause or resume ``queue`` (idempotent; a queue with no jobs yet may be paused)."""
    acknowledged = backend.queue_pause(_checked(queue), paused)
    since = backend.paused_queues().get(queue, acknowledged) if paused else None
    return QueuePause(queue, paused, since, acknowledged)


def paused_queues(backend: Backend) -> dict[str, int]:
    """Every paused queue and when it was paused (store ms), by name."""
    return dict(sorted(backend.paused_queues().items()))
