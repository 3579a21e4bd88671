"""``celery-plus migrate-queue``: move a legacy kombu Redis queue's messages into the durable store.

What moves: the queue's pending messages, priority list by priority list in kombu's delivery
order (step 0 first, oldest first within a list), and, with ``include_unacked``, the entries
of kombu's ``unacked`` hash that belong to the queue and are older than a cut-off (only then
is no legacy worker still running them: see docs/migration.md).

Guarantees: every message ends up in the store once, by task id: a message whose task id
the store already has is dropped as a copy. Two movers (``queue_migration/movers.py``):

* the store is Redis on the legacy server: each batch is one Lua script that checks and pops
  the messages and stores them (``migrate.lua`` here), so an interruption loses nothing and
  duplicates nothing;
* any other store (PostgreSQL, SQLite, another Redis): messages are first moved atomically
  (``LMOVE``) to a per-queue staging list on the legacy server, then published unless the
  store already has their task id, then removed from staging; a re-run drains staging first.

Messages that are no kombu envelope are dead-lettered with their raw bytes. One migration per
queue at a time (a lock on the legacy server; the lock of a dead process on this host is
taken over). ``dry_run`` counts and changes nothing.
"""

from __future__ import annotations

from celery_plus.model.store import Backend
from celery_plus.queue_migration.movers import ScriptMover, StagedMover, same_server
from celery_plus.queue_migration.parts import (
    MALFORMED_ERROR,
    MALFORMED_REASON,
    Item,
    Lock,
    MigrateOptions,
    MigrationError,
    Progress,
    Source,
    Tally,
    _Pace,
    existing_ids,
)
from celery_plus.transport.legacy import fail_parked


def migrate(source: Source, backend: Backend, options: MigrateOptions,
            progress: Progress | None = None) -> Tally:
    """Move ``options.queue`` into ``backend`` (or count, on a dry run); the tally."""
    older_than = (source.layout.visibility_timeout if options.unacked_older_than is None
                  else options.unacked_older_than)
    if options.dry_run:
        return plan(source, backend, options, older_than)
    lock = Lock(source.client, source.layout.lock(source.queue))
    lock.acquire()
    try:
        mover = (ScriptMover(source, backend) if same_server(backend, source.client)
                 else StagedMover(source, backend))
        tally = Tally(planned=_pending(source) + (
            len(source.unacked_items(older_than)[0]) if options.include_unacked else 0))
        pace = _Pace(options.rate)
        report = progress or (lambda _stage, _tally: None)
        tally.malformed += fail_parked(  # dead letters an interrupted run parked
            backend, source.side_queue, MALFORMED_REASON,
            MALFORMED_ERROR.format(queue=source.queue), source.worker_id)
        while True:
            taken = 0
            for key in source.lists():
                taken += mover.drain_list(key, options.batch_size, tally, pace, lock, report)
            if options.include_unacked:
                items, tally.unacked_left = source.unacked_items(older_than)
                before = tally.done
                taken += mover.move_unacked(items, options.batch_size, tally, pace, lock,
                                            report)
                tally.from_unacked += tally.done - before
            if not taken:  # a pass that found nothing: the queue is empty
                break
        if not options.include_unacked:
            tally.unacked_left = source.unacked_count()
        report("done", tally)
        return tally
    finally:
        lock.release()


def _pending(source: Source) -> int:
    pipe = source.client.pipeline(transaction=False)
    for key in source.lists():
        pipe.llen(key)
    return sum(int(n) for n in pipe.execute())


def plan(source: Source, backend: Backend, options: MigrateOptions,
         older_than: float) -> Tally:
    """A dry run: what a migration would do now, counted by reading only."""
    tally = Tally()
    items: list[Item] = []
    for key in source.lists():
        for start in range(0, int(source.client.llen(key)), 1000):
            chunk = source.client.lrange(key, -start - 1000, -start - 1)
            items += [source.item(raw) for raw in reversed(chunk)]
    if options.include_unacked:
        unacked, tally.unacked_left = source.unacked_items(older_than)
        tally.from_unacked = len(unacked)
        items += unacked
    else:
        tally.unacked_left = source.unacked_count()
    tally.planned = len(items)
    jobs = [item.job for item in items if item.job is not None]
    present = existing_ids(backend, [job.id for job in jobs])
    seen: set[str] = set()
    for job in jobs:
        if job.id in present or job.id in seen:
            tally.present += 1
        else:
            tally.moved += 1
        seen.add(job.id)
    tally.malformed = len(items) - len(jobs)
    return tally


__all__ = ["Lock", "MigrateOptions", "MigrationError", "Source", "Tally", "migrate", "plan"]
