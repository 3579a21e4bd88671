"""Which claim a publish continues: the lease token a retry or ``Task.replace`` carries.

Celery retries (and replaces) a task by publishing a new message with the running task's id
from the task's own process — a prefork child, which has no channel and no delivery tag. So
the transport hands each delivery's lease token to the task with the message, as the header
:data:`LEASE_HEADER` (Celery copies message headers into the request: ``task.request`` has
it in any pool, for any ``Task`` class), and a publish made while that task runs, of that
task's id, carries the token back to the store (:func:`continued_token`). The store applies
such a continuation only while that claim is current; see ``docs/decisions.md``.
"""

from __future__ import annotations

from typing import Any

from celery._state import get_current_task

#: The delivered message header holding the delivery's lease token.
LEASE_HEADER = "plus_lease"


def add_lease_header(raw: dict[str, Any], token: int) -> None:
    """Put the delivery's lease ``token`` into the message about to be delivered."""
    headers = raw.get("headers")
    if headers is None:
        headers = raw["headers"] = {}
    if isinstance(headers, dict):
        headers[LEASE_HEADER] = token


def continued_token(job_id: str) -> int:
    """The lease token of the running task whose id is ``job_id`` (0 if none runs here).

    A publish of the current task's own id is its continuation (retry, replace); any other
    publish continues nothing.
    """
    task = get_current_task()
    if task is None:
        return 0
    request = task.request
    if getattr(request, "id", None) != job_id:
        return 0
    try:
        return int(getattr(request, LEASE_HEADER, 0) or 0)
    except (TypeError, ValueError):
        return 0
