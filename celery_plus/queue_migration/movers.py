"""The two ways ``migrate-queue`` moves a batch (see ``migrate.py`` for the guarantees).

:class:`ScriptMover`: the durable store is Redis on the legacy server; one Lua script per
batch takes the messages off the legacy list (or unacked hash) and stores them.

:class:`StagedMover`: the store is elsewhere, so no single step spans both. The protocol:
1. ``LMOVE`` messages from the legacy list to the queue's staging list (each move atomic,
   on the legacy server), oldest first;
2. publish each staged message unless the store already has its task id (any state);
3. ``LTRIM`` the published messages off the staging list.
A crash after 1 leaves messages in staging, which the next run drains first; after 2, the
next run finds their ids in the store and only removes them from staging. Nothing is lost,
nothing is stored twice.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import redis

from celery_plus.model.store import Backend
from celery_plus.stores.redis.backend import RedisBackend
from celery_plus.stores.redis.scripts import read_lua, with_publish_job
from celery_plus.transport.legacy import fail_parked

if TYPE_CHECKING:
    from celery_plus.queue_migration.parts import Item, Lock, Progress, Source, Tally, _Pace

#: Reply of one batch: (taken off the legacy side, moved, present, coalesced, bad).
Reply = Sequence[int]

#: Staged mover, unacked entries: take each tag still in the hash out of the hash and its
#: index and push its envelope onto the staging list, atomically.
# ARGV: 1 unacked hash, 2 index, 3 staging list, then pairs: delivery tag, envelope.
UNACKED_TO_STAGING = """
local n = 0
for i = 4, #ARGV, 2 do
  if redis.call('HDEL', ARGV[1], ARGV[i]) == 1 then
    redis.call('ZREM', ARGV[2], ARGV[i])
    redis.call('LPUSH', ARGV[3], ARGV[i + 1])
    n = n + 1
  end
end
return n
"""


def migrate_script_source() -> str:
    """lib.lua + publish.lua as ``publish_job(A)`` + migrate.lua: the same-server move."""
    return with_publish_job(read_lua("migrate.lua", package=__package__))


def same_server(backend: Backend, client: redis.Redis) -> bool:
    """True if ``backend`` is a Redis store on the server (and db) ``client`` talks to."""
    if not isinstance(backend, RedisBackend):
        return False

    def where(c: redis.Redis) -> tuple[Any, ...]:
        kw = c.connection_pool.connection_kwargs
        return (kw.get("host"), int(kw.get("port") or 6379), kw.get("path"),
                int(kw.get("db") or 0))

    return where(backend.client) == where(client)


class _Mover:
    """The batch loop both movers share: read, move, account, renew the lock, pace, report."""

    def __init__(self, source: Source, backend: Backend) -> None:
        self.source = source
        self.backend = backend

    def drain_list(self, key: str, batch: int, tally: Tally, pace: _Pace, lock: Lock,
                   report: Progress) -> int:
        """Move everything in legacy list ``key``; how many messages were taken off it."""
        taken = 0
        while True:
            reply = self.move_list_batch(key, batch)
            if reply is None:
                return taken
            taken += self._account(reply, tally, pace, lock, report)

    def move_unacked(self, items: list[Item], batch: int, tally: Tally, pace: _Pace,
                     lock: Lock, report: Progress) -> int:
        taken = 0
        for start in range(0, len(items), batch):
            reply = self.move_unacked_batch(items[start:start + batch])
            taken += self._account(reply, tally, pace, lock, report)
        return taken

    def _account(self, reply: Reply, tally: Tally, pace: _Pace, lock: Lock,
                 report: Progress) -> int:
        from celery_plus.queue_migration.parts import MALFORMED_ERROR, MALFORMED_REASON

        tally.add(reply)
        if reply[4]:
            fail_parked(self.backend, self.source.side_queue, MALFORMED_REASON,
                        MALFORMED_ERROR.format(queue=self.source.queue),
                        self.source.worker_id)
        lock.renew()
        report("batch", tally)
        pace.took(reply[0])
        return int(reply[0])

    def move_list_batch(self, key: str, batch: int) -> Reply | None:
        """Move up to ``batch`` of the oldest messages of ``key``; None when it is empty."""
        raise NotImplementedError

    def move_unacked_batch(self, items: list[Item]) -> Reply:
        raise NotImplementedError


class ScriptMover(_Mover):
    """Same server: check, pop and store each batch in one script (``migrate.lua`` here)."""

    backend: RedisBackend

    def __init__(self, source: Source, backend: Backend) -> None:
        super().__init__(source, backend)
        assert isinstance(backend, RedisBackend)
        self.script = backend.client.register_script(migrate_script_source())

    def move_list_batch(self, key: str, batch: int) -> Reply | None:
        raws = self.source.client.lrange(key, -batch, -1)
        if not raws:
            return None
        items = [self.source.item(raw) for raw in reversed(raws)]  # the tail is the oldest
        return self._run("list", key, "", items)

    def move_unacked_batch(self, items: list[Item]) -> Reply:
        layout = self.source.layout
        return self._run("unacked", layout.unacked, layout.unacked_index, items)

    def _run(self, mode: str, key: str, index: str, items: list[Item]) -> Reply:
        args: list[Any] = [self.backend.prefix, mode, key, index]
        for item in items:
            job = item.job or self.source.bad_job(item.raw, f"malformed-{uuid.uuid4()}")
            # The store's own publish arguments (after the prefix), so a moved message is
            # stored exactly as publishing it would store it.
            publish = self.backend._publish_args(job)[1:]
            args += [item.tag or item.raw, "job" if item.job else "bad", job.id,
                     len(publish), *publish]
        return [int(x) for x in self.script(args=args)]


class StagedMover(_Mover):
    """Store elsewhere: LMOVE to staging, publish unless present, LTRIM (module docstring)."""

    def __init__(self, source: Source, backend: Backend) -> None:
        super().__init__(source, backend)
        self.to_staging = source.client.register_script(UNACKED_TO_STAGING)

    def move_list_batch(self, key: str, batch: int) -> Reply | None:
        client, staging = self.source.client, self.source.staging
        if key != staging and not client.llen(staging):
            pipe = client.pipeline(transaction=False)
            for _ in range(batch):
                pipe.lmove(key, staging, "RIGHT", "LEFT")
            if not any(value is not None for value in pipe.execute()):
                return None
        return self._publish_staged(batch)

    def move_unacked_batch(self, items: list[Item]) -> Reply:
        layout = self.source.layout
        args: list[Any] = [layout.unacked, layout.unacked_index, self.source.staging]
        for item in items:
            if item.job is not None:
                args += [item.tag, item.job.message]
        self.to_staging(args=args)
        taken = [0, 0, 0, 0, 0]
        while (reply := self._publish_staged(len(items) or 1)) is not None:
            taken = [a + b for a, b in zip(taken, reply, strict=True)]
        return taken

    def _publish_staged(self, batch: int) -> Reply | None:
        """Store the oldest ``batch`` staged messages (unless present), then trim them."""
        client, staging, source = self.source.client, self.source.staging, self.source
        raws = client.lrange(staging, -batch, -1)
        if not raws:
            return None
        items = [source.item(raw) for raw in reversed(raws)]
        jobs = [item.job or source.bad_job(item.raw, _bad_id(item.raw)) for item in items]
        from celery_plus.queue_migration.parts import existing_ids

        present = existing_ids(self.backend, {job.id for job in jobs})
        fresh, seen, dropped = [], set(), 0
        for job in jobs:
            if job.id in present or job.id in seen:
                dropped += 1
            else:
                fresh.append(job)
            seen.add(job.id)
        outcomes = self.backend.publish_many(fresh) if fresh else []
        bad = sum(1 for job in fresh if job.queue == source.side_queue)
        moved = sum(1 for job, o in zip(fresh, outcomes, strict=True)
                    if o.accepted and job.queue != source.side_queue)
        coalesced = len(fresh) - bad - moved
        client.ltrim(staging, 0, -len(raws) - 1)  # only this process touches staging (lock)
        return [len(raws), moved, dropped, coalesced, bad]


def _bad_id(raw: bytes) -> str:
    """A malformed message's job id, from its bytes: a re-run recognises it."""
    return "malformed-" + hashlib.sha256(raw).hexdigest()[:32]
