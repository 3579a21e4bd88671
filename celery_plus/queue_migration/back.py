"""``celery-plus migrate-queue NAME --back``: move a durable queue's waiting jobs back to plain
Celery's Redis broker (the rollback of ``migrate.py``).

What moves: the queue's jobs that wait for a worker — ``enqueued``, ``scheduled`` (ETA /
countdown) and ``blocked`` (parked behind a full concurrency group) — oldest first, state by
state in that order. Each becomes a message on kombu's list of the queue, published **through
kombu's producer** on the plain broker, so kombu writes its delivery properties (delivery tag,
delivery info) itself as for any publish: the stored envelope's body, content type, encoding,
headers and properties are given back unchanged, by the anonymous exchange with the queue's
name as routing key. A scheduled job keeps its ``eta`` header (plain Celery keeps ETA messages
in the list and the worker holds them until due); one whose message has none (a delay the
store decided) gets the job's due time as ``eta``.

What stays: ``running`` jobs (they finish on their celery-plus worker; one whose worker died
comes back to ``enqueued`` when its lease lapses, and the next run moves it), dead letters
(``failed``: ``celery-plus dlq retry`` makes them ``enqueued`` again), finished records, and a
stored message that is not a kombu envelope (counted, left for the admin).

The order of a batch: publish every message of the batch on the plain broker, **then** cancel
the jobs in the store (``cancel``: one atomic step per job that re-checks that it still
waits) and delete the canceled records (``purge``: a forward migration would take a message
whose task id the store still has for a copy, and drop it). A crash between the publish and
the cancel leaves the jobs waiting in the store and their messages on the plain list: the
next run publishes them again. So a crash can duplicate at most one batch of messages (each
copy with the same task id), never lose one. A job that a celery-plus worker claims between
the publish and the cancel also runs twice (counted as ``raced``): run with no celery-plus
worker consuming the queue.

One run per queue at a time, and never together with a forward migration of the same queue:
both take the same lock (``Lock``, ``layout.lock(queue)``) on the plain broker's Redis.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from celery_plus.coordination import envelope
from celery_plus.model.admin import WAITING, AdminStore, JobSummary, Query, Scope, batches
from celery_plus.model.store import Backend
from celery_plus.queue_migration.parts import Lock, _Pace


@dataclass(frozen=True)
class BackOptions:
    queue: str
    batch_size: int = 500
    #: At most this many messages per second (None: as fast as the brokers go).
    rate: float | None = None
    dry_run: bool = False


@dataclass
class BackTally:
    """What a move back did (or, in a dry run, would do)."""

    moved: int = 0  # published on the plain broker and canceled in the store
    scheduled: int = 0  # of ``moved``, ETA jobs (published with their eta header)
    raced: int = 0  # published, but no longer waiting when canceled (claimed meanwhile)
    unreadable: int = 0  # stored message is no kombu envelope: left in the store
    running: int = 0  # running jobs of the queue, left to their workers
    dead: int = 0  # dead letters (failed) of the queue, left in the store
    planned: int = 0  # waiting jobs when the run started

    @property
    def done(self) -> int:
        return self.moved + self.raced + self.unreadable


BackProgress = Callable[[str, BackTally], None]


def count(admin: AdminStore, queue: str, states: Iterable[str]) -> int:
    """How many jobs of ``queue`` are in ``states``."""
    return sum(admin.jobs(state, Query(queue=queue), 0, 1)[1] for state in states)


def move_back(backend: Backend, admin: AdminStore, producer: Any, lock: Lock | None,
              options: BackOptions, progress: BackProgress | None = None) -> BackTally:
    """Move ``options.queue``'s waiting jobs from ``backend`` to ``producer``'s broker (or
    count them, on a dry run); the tally. ``lock`` (taken and released here) keeps it the
    only migration of the queue."""
    queue = options.queue
    tally = BackTally(planned=count(admin, queue, WAITING))
    if options.dry_run:
        tally.running = count(admin, queue, ("running",))
        tally.dead = count(admin, queue, ("failed",))
        return tally
    if lock is not None:
        lock.acquire()
    try:
        pace = _Pace(options.rate)
        report = progress or (lambda _stage, _tally: None)
        unreadable: set[str] = set()
        while True:  # passes until one finds nothing: a scheduled job may become enqueued
            taken = 0
            for state in WAITING:
                skip = 0  # unreadable jobs stay at the head of the oldest-first listing
                while True:
                    rows, _ = admin.jobs(state, Query(queue=queue, oldest_first=True), skip,
                                         options.batch_size)
                    if not rows:
                        break
                    published = _publish(backend, producer, queue, rows, unreadable)
                    skip += len(rows) - len(published)
                    _remove(admin, published, tally)
                    tally.unreadable = len(unreadable)
                    taken += len(published)
                    if lock is not None:
                        lock.renew()
                    report("batch", tally)
                    pace.took(len(rows))
            if not taken:
                break
        tally.running = count(admin, queue, ("running",))
        tally.dead = count(admin, queue, ("failed",))
        report("done", tally)
        return tally
    finally:
        if lock is not None:
            lock.release()


def _publish(backend: Backend, producer: Any, queue: str, rows: list[JobSummary],
             unreadable: set[str]) -> list[JobSummary]:
    """Publish the rows' messages on the plain broker; the rows published (the ids of those
    whose stored message is no kombu envelope go to ``unreadable``)."""
    published = []
    for row in rows:
        raw = backend.raw_message(row.id)
        try:
            message = envelope.parse(raw or b"")
        except (ValueError, TypeError):
            unreadable.add(row.id)
            continue
        envelope.publish_with(producer, message, queue, eta_header(message, row),
                              exchange="", routing_key=queue)
        published.append(row)
    return published


def _remove(admin: AdminStore, rows: list[JobSummary], tally: BackTally) -> None:
    """Remove the published rows' jobs from the store (after the publish: see the module
    docstring): cancel each (it still waits), then delete the canceled records, so a later
    forward migration does not take the moved messages for copies of stored jobs."""
    canceled = []
    for row in rows:
        if admin.cancel(row.id).changed:
            tally.moved += 1
            tally.scheduled += row.state == "scheduled"
            canceled.append(row.id)
        else:
            tally.raced += 1
    for chunk in batches(canceled):
        admin.purge("canceled", Scope(ids=tuple(chunk)))


def eta_header(message: dict[str, Any], row: JobSummary) -> dict[str, Any]:
    """The header a scheduled job's message needs: its ``eta`` (Celery's protocol 2, ISO 8601,
    UTC) when it has none; nothing otherwise."""
    headers = message.get("headers") or {}
    if row.state != "scheduled" or headers.get("eta") or not row.due_ms:
        return {}
    due = datetime.datetime.fromtimestamp(row.due_ms / 1000, tz=datetime.timezone.utc)
    return {"eta": due.isoformat()}


__all__ = ["BackOptions", "BackTally", "eta_header", "move_back"]
