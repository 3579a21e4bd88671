"""Remote control a worker on the ``plus`` transport answers from the store.

With kombu's Redis transport an ETA/countdown task is delivered at once and waits in the
worker's timer, which is what ``inspect scheduled`` lists. On the ``plus`` transport it waits
in the store (state ``scheduled``) and reaches a worker only when due, so the worker answers
``scheduled`` from the store: the scheduled jobs of the queues it consumes, in Celery's reply
format (``{'eta', 'priority', 'request'}``, the request as its ``Request.info()``), after any
request its own timer holds. Every worker consuming a queue lists that queue's jobs: a job
waits for whichever worker claims it when due, not for one worker.

``inspect reserved`` needs no change: a worker's prefetched deliveries are in its memory as
with Redis, and a job waiting for its ETA is not reserved on either transport.

:func:`install` replaces Celery's ``scheduled`` command for every worker in the process; on
any other transport it answers exactly as Celery's does.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from celery.worker import control
from kombu.transport.virtual import Message

logger = logging.getLogger("celery_plus.worker")

#: Most store jobs one ``scheduled`` reply lists (Celery's client waits 1 s for replies).
SCHEDULED_LIMIT = 1000
#: The timer priority Celery's worker gives ETA requests (what its reply reports).
ETA_PRIORITY = 6

_celery_scheduled = control.Panel.data.get("scheduled")


def _plus_transport(state: Any) -> Any:
    from celery_plus.transport import Transport

    try:
        transport = state.consumer.connection.transport
    except AttributeError:
        return None
    return transport if isinstance(transport, Transport) else None


def _consumed_queues(state: Any) -> list[str]:
    consumer = getattr(state.consumer, "task_consumer", None)
    return [queue.name for queue in getattr(consumer, "queues", None) or ()]


def _request(app: Any, hostname: str, channel: Any, raw: str | bytes) -> Any:
    """Celery's ``Request`` of a stored task message (None: not a task this worker knows)."""
    from celery.worker.request import Request

    payload = json.loads(raw)
    headers = payload.get("headers") or {}
    task = app.tasks.get(headers.get("task"))
    if task is None or "id" not in headers:
        return None
    # Not delivered: no delivery tag yet (the lean publish path stores none).
    payload["properties"].setdefault("delivery_tag", headers["id"])
    return Request(Message(payload, channel=channel), app=app, hostname=hostname, task=task)


def store_scheduled(state: Any, transport: Any) -> list[dict[str, Any]]:
    """The scheduled store jobs of the worker's queues, as Celery's ``scheduled`` lists."""
    queues = _consumed_queues(state)
    if not queues:
        return []
    app, hostname = state.app, state.hostname
    channel = state.consumer.connection.default_channel
    out = []
    for job in transport.backend.scheduled_jobs(queues, SCHEDULED_LIMIT):
        try:
            request = _request(app, hostname, channel, job.message)
        except Exception as exc:  # a malformed message is the worker's to dead-letter
            logger.debug("celery-plus: scheduled job %s not listed: %r", job.job_id, exc)
            continue
        if request is not None:
            out.append({"eta": request.eta.isoformat() if request.eta else None,
                        "priority": ETA_PRIORITY, "request": request.info()})
    return out


def scheduled(state: Any, **kwargs: Any) -> list[dict[str, Any]]:
    """List of currently scheduled ETA/countdown tasks."""
    listed = list(_celery_scheduled(state, **kwargs)) if _celery_scheduled else []
    transport = _plus_transport(state)
    if transport is None:
        return listed
    held = {item["request"]["id"] for item in listed}
    return listed + [item for item in store_scheduled(state, transport)
                     if item["request"]["id"] not in held]


def install() -> None:
    """Make every worker in this process answer ``scheduled`` through :func:`scheduled`."""
    if control.Panel.data.get("scheduled") is not scheduled:
        control.inspect_command(alias="dump_schedule")(scheduled)
