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

from collections.abc import Iterator
from typing import Any

from celery._state import get_current_task

#: Message property of a delivery: until when (``leases.keeper.clock()``) its lease is
#: certainly still ours; a task starting later asks the store first (``start_check.py``).
SURE_UNTIL = "plus_lease_sure_until"


def delivery_tag(job_id: str, token: int) -> str:
    """The kombu delivery tag of the claim (``job_id``, ``token``): ``"<token>:<job id>"``."""
    return f"{token}:{job_id}"


def parse_delivery_tag(tag: str) -> tuple[str, int] | None:
    """(job id, token) of a delivery tag made by :func:`delivery_tag`; None for any other."""
    token, sep, job_id = str(tag).partition(":")
    if not sep or not token.isdigit():
        return None
    return job_id, int(token)


#: The delivered message header holding the delivery's lease token.
LEASE_HEADER = "plus_lease"
#: The header of a message that continues a claim from another task's process: the part of a
#: ``Task.replace`` canvas that inherits the replaced task's id (a chain's last step, a
#: chord's body), published later by whichever worker runs the step before it.
CARRIED_HEADER = "plus_continues"


def add_lease_header(raw: dict[str, Any], token: int) -> None:
    """Put the delivery's lease ``token`` into the message about to be delivered."""
    headers = raw.get("headers")
    if headers is None:
        headers = raw["headers"] = {}
    if isinstance(headers, dict):
        headers[LEASE_HEADER] = token


def _token(value: Any) -> int:
    try:
        return max(int(value or 0), 0)
    except (TypeError, ValueError):
        return 0


def _current_claim() -> tuple[str, int] | None:
    """(task id, lease token) of the task running in this thread, if it has a token."""
    task = get_current_task()
    if task is None:
        return None
    request = task.request
    token = _token(getattr(request, LEASE_HEADER, 0))
    task_id = getattr(request, "id", None)
    return (task_id, token) if token and task_id else None


def continued_token(job_id: str, headers: dict[str, Any] | None = None) -> int:
    """The lease token the publish of ``job_id`` continues (0: it continues nothing).

    A publish of the current task's own id is its continuation (retry, replace); so is a
    message that carries a replaced task's token (:data:`CARRIED_HEADER`, see
    :func:`carry_into_replacement`). Any other publish continues nothing.
    """
    claim = _current_claim()
    if claim is not None and claim[0] == job_id:
        return claim[1]
    return _token((headers or {}).get(CARRIED_HEADER))


def _signatures(value: Any) -> Iterator[dict[str, Any]]:
    """Every signature (as the dicts a message body embeds) in ``value``, nested ones too."""
    if isinstance(value, dict):
        if "task" in value and isinstance(value.get("options"), dict):
            yield value
        for key in ("tasks", "header", "body"):
            yield from _signatures((value.get("kwargs") or {}).get(key))
        for key in ("chain", "chord", "callbacks", "errbacks", "link", "link_error"):
            yield from _signatures(value.get(key) or value.get("options", {}).get(key))
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _signatures(item)


def carry_into_replacement(sender: Any = None, body: Any = None, headers: Any = None,
                           **_: Any) -> None:
    """Give the signature that inherits a replaced task's id that claim's lease token.

    ``Task.replace(a.s() | b.s())`` freezes the replacement with the running task's id: the
    chain's last step (or a chord's body) takes it, and is published later by the worker
    that runs the step before it — outside the replaced task, so the store could not tell
    it from any other publish of a running id (which changes nothing). The replaced task
    publishes the canvas's first message itself: this receiver marks the embedded signature
    carrying its id with :data:`CARRIED_HEADER`, so that publish continues the claim (or
    starts the job anew once the claim has finished, as a continuation does).
    """
    claim = _current_claim()
    if claim is None or not isinstance(headers, dict) or headers.get("id") == claim[0]:
        return
    if not isinstance(body, (list, tuple)) or len(body) < 3 or not body[2]:
        return  # protocol 1, or nothing embedded
    task_id, token = claim
    for sig in _signatures(body[2]):
        options = sig["options"]
        if options.get("task_id") == task_id:
            carried = options.get("headers")
            options["headers"] = {**(carried if isinstance(carried, dict) else {}),
                                  CARRIED_HEADER: token}
