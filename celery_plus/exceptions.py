"""Celery's exceptions, plus :class:`DuplicateTask`."""

from __future__ import annotations

from celery.exceptions import *  # noqa: F403
from celery.exceptions import CeleryError, ImproperlyConfigured
from celery.exceptions import __all__ as _celery_all


class DuplicateTask(CeleryError):
    """A publish coalesced into the job holding the same unique key.

    Raised instead of returning the holder's result when the task declares
    ``unique_on_duplicate="raise"``. ``holder_id`` is the task id of the job holding the key.
    """

    def __init__(self, task_name: str, holder_id: str, unique_key: str) -> None:
        self.task_name = task_name
        self.holder_id = holder_id
        self.unique_key = unique_key
        super().__init__(
            f"{task_name}: a job with unique key {unique_key!r} is already held by {holder_id}"
        )

    def __reduce__(self) -> tuple[type, tuple[str, str, str]]:
        return (type(self), (self.task_name, self.holder_id, self.unique_key))


class QueueScopeError(ImproperlyConfigured):
    """A task with queue-scoped guarantees (a Redis Cluster store) published to a queue other
    than its home queue (docs/redis-cluster.md)."""


__all__ = [*_celery_all, "DuplicateTask", "QueueScopeError"]
