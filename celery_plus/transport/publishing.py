"""Publishing durable jobs: a kombu envelope described as a job, and where it is written.

A durable publish (``Channel._put``) becomes a :class:`~celery_plus.model.store.NewJob`
(:func:`job_from_message`) and is written (:func:`write_job`) into the caller's transaction
(:data:`current_transaction`), into the batch collected in this context (:data:`current_batch`),
or else to the store at once; :data:`last_publish` tells the app's send path what came of it.
"""

from __future__ import annotations

import uuid
from contextvars import ContextVar
from datetime import datetime, timezone
from typing import Any

from kombu.utils.json import dumps

from celery_plus import signals
from celery_plus.leases.tokens import continued_token
from celery_plus.model.store import JobStore, NewJob, PublishOutcome

#: The outcome of the last durable publish in this context (read by the app's send path).
last_publish: ContextVar[PublishOutcome | None] = ContextVar("plus_last_publish", default=None)


class PublishBatch:
    """Durable publishes collected in this context, stored together in one round trip.

    While a batch is active, ``_put`` hands jobs here instead of to the backend; ``flush``
    publishes them per backend with ``publish_many`` and returns the outcomes in order.
    """

    def __init__(self) -> None:
        self.jobs: list[tuple[JobStore, NewJob]] = []
        #: What the send path wants to hear about each job id once the batch is stored.
        self.watched: dict[str, Any] = {}

    def watch(self, job_id: str, what: Any) -> None:
        self.watched[job_id] = what

    def add(self, backend: JobStore, job: NewJob) -> None:
        self.jobs.append((backend, job))

    def flush(self) -> list[PublishOutcome]:
        jobs, self.jobs = self.jobs, []
        outcomes: list[PublishOutcome | None] = [None] * len(jobs)
        by_backend: dict[int, tuple[JobStore, list[int]]] = {}
        for index, (backend, _) in enumerate(jobs):
            by_backend.setdefault(id(backend), (backend, []))[1].append(index)
        for backend, indexes in by_backend.values():
            published = backend.publish_many([jobs[i][1] for i in indexes])
            for i, outcome in zip(indexes, published, strict=True):
                outcomes[i] = outcome
        return [o for o in outcomes if o is not None]


#: The batch collecting durable publishes in this context (see ``Celery.publish_batch``).
current_batch: ContextVar[PublishBatch | None] = ContextVar("plus_publish_batch", default=None)

#: The caller's transaction durable publishes are written in, in this context: an object with
#: ``publish(backend, job) -> PublishOutcome`` (see ``celery_plus.send.transactional.enqueue_in``).
current_transaction: ContextVar[Any] = ContextVar("plus_transaction", default=None)


def _eta_ms(value: Any) -> int:
    if not value:
        return 0
    try:
        when = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return 0
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return int(when.timestamp() * 1000)


def job_from_message(queue: str, message: dict[str, Any], max_deliveries: int,
                     rate_margin_ms: int = 0) -> NewJob:
    """Describe a kombu envelope as a job, reading celery-plus's ``plus`` header.

    A cluster rate limit's window is stored ``rate_margin_ms`` longer
    (``plus_rate_limit_margin``): the limit holds for the tasks' starts, a little after their
    claims, too.

    A job's identity is its task id (``headers['id']``) and nothing else: a correlation id
    names the task a *reply* is about (``rpc://`` results carry the task's id there), so
    taking it would make a reply overwrite the task's own record. A message without a task
    id (a plain kombu message) gets an id of its own.
    """
    headers = message.get("headers") or {}
    props = message.get("properties") or {}
    ext = headers.get("plus") or {}
    unique = ext.get("u") or ("", "", 0)
    group = ext.get("c") or ("", 0)
    rate = ext.get("r") or ("", 0, 0)
    try:
        priority = min(max(int(props.get("priority") or 0), 0), 255)
    except (TypeError, ValueError):
        priority = 0
    job_id = str(headers.get("id") or uuid.uuid4())
    return NewJob(
        id=job_id,
        queue=queue,
        message=dumps(message),
        name=str(headers.get("task") or ""),
        priority=priority,
        eta_ms=_eta_ms(headers.get("eta")),
        unique_lock=unique[0],
        unique_window=unique[1],
        unique_ttl_ms=int(unique[2] or 0),
        concurrency_group=group[0],
        concurrency_limit=int(group[1] or 0),
        max_deliveries=int(ext.get("md") or max_deliveries),
        rate_group=rate[0],
        rate_limit=int(rate[1] or 0),
        rate_window_ms=int(rate[2] or 0) + (rate_margin_ms if rate[0] else 0),
        lease_token=continued_token(job_id, headers),
    )


def write_job(backend: JobStore, job: NewJob) -> None:
    """Write ``job`` into the caller's transaction, the batch of this context, or else the
    store itself; :data:`last_publish` tells the outcome."""
    transaction = current_transaction.get()
    if transaction is not None:
        last_publish.set(transaction.publish(backend, job))
        return
    batch = current_batch.get()
    if batch is not None:
        batch.add(backend, job)
        last_publish.set(PublishOutcome(True, job.id, state="batched"))
        return
    outcome = backend.publish(job)
    last_publish.set(outcome)
    signals.task_published.send(sender=job.name or None, task_id=job.id,
                                deduplicated=not outcome.accepted, holder_id=outcome.holder_id)
