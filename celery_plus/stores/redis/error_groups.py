"""Dead letters grouped by error on Redis: an index the admin keeps beside ``P:dead``.

The store's scripts are not touched (no worker or Function release is involved): the admin
syncs its own index (``lua/admin/error_groups_*.lua``, schema in ``error_groups_lib.lua``) from
``P:dead`` by finish score before each read, as it syncs its listing index, so a page load reads
the new dead letters since the last one and each group's members (one ``ZDIFF`` per group drops
those that left), never the records of every dead letter.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

from celery_plus.model.admin import as_text
from celery_plus.model.error_groups import ErrorGroup, ErrorGroups, group_id, ordered
from celery_plus.stores.redis.scripts import lib_lua, read_lua

#: The index's scripts (``lua/admin/<name>.lua``), each after lib.lua and error_groups_lib.lua.
SCRIPTS = ("error_groups_sync", "error_groups_list", "error_groups_page")
#: Dead letters a sync reads per script call (bounds the time Redis is busy).
SYNC_BATCH = 5000
#: Sync calls a read of the groups makes at most (the group pages and actions sync all).
SYNC_BATCHES_PER_READ = 4
#: A sync re-reads members finished this long below the highest one indexed (a clock step).
SYNC_MARGIN_MS = 1000


def sources() -> dict[str, str]:
    lib, groups_lib = lib_lua(), read_lua("admin/error_groups_lib.lua")
    return {name: "\n".join((lib, groups_lib, read_lua(f"admin/{name}.lua")))
            for name in SCRIPTS}


class RedisErrorGroups:
    """``error_groups`` / ``error_group_ids`` of :class:`~celery_plus.stores.redis.admin.
    RedisAdmin` (a mixin: it uses the admin's ``client`` and ``prefix``)."""

    client: Any
    prefix: str

    def _group_call(self, script: str, *args: Any) -> Any:
        scripts = self.__dict__.get("_group_scripts")
        if scripts is None:
            scripts = self.__dict__["_group_scripts"] = {
                name: self.client.register_script(src) for name, src in sources().items()}
        return scripts[script](keys=[self.prefix], args=[self.prefix, *args])

    def _sync_groups(self, batches: int | None = None) -> tuple[int, int] | None:
        """Index the dead letters finished since the last sync, SYNC_BATCH a call, at most
        ``batches`` calls (None: all); None once it caught up, else where the next sync
        resumes: (the lowest score left, the members at that score done)."""
        resume_key = f"{self.prefix}:ax:dead:gnext"
        resume = self.client.get(resume_key)
        hw = self.client.get(f"{self.prefix}:ax:dead:ghw")
        low: str | int = "-inf" if hw is None else int(hw) - SYNC_MARGIN_MS
        skip = 0
        if resume is not None:  # where a bounded sync stopped (not hw's margin: the margin
            # may hold more members than a step reads, which would never get past them)
            low, skip = (int(part) for part in as_text(resume).split())
        for _ in itertools.count() if batches is None else range(batches):
            read, high, at_high = self._group_call("error_groups_sync", low, skip, SYNC_BATCH)
            if int(read) < SYNC_BATCH:
                if resume is not None:
                    self.client.delete(resume_key)
                return None
            high = int(as_text(high))
            skip = skip + int(read) if high == low else int(at_high)
            low = high
        self.client.set(resume_key, f"{low} {skip}")
        return int(low), skip

    def error_groups(self, limit: int) -> ErrorGroups:
        # A bounded step per read: the first read of a store with 100,000 dead letters
        # built the whole index (3 to 5 s); the rest is read by the next loads (or at once
        # by a group's page or action), and the answer says how many are not counted yet.
        left = self._sync_groups(SYNC_BATCHES_PER_READ)
        reply = self._group_call("error_groups_list")
        groups = [ErrorGroup(as_text(reply[i + 1]), as_text(reply[i + 2]), int(reply[i + 3]),
                             int(float(reply[i + 4])), int(float(reply[i + 5])))
                  for i in range(0, len(reply), 6)]
        found = ordered(groups, limit)
        if left is None:
            return found
        # Not read yet: those above the highest score indexed, and those at it that the
        # step stopped before (members sharing a finish ms); below it a step only re-reads
        # the sync's margin.
        low, done = left
        dead, hw = f"{self.prefix}:dead", int(self.client.get(f"{self.prefix}:ax:dead:ghw") or 0)
        unread = int(self.client.zcount(dead, f"({hw}", "+inf"))
        if low == hw:
            unread += max(0, int(self.client.zcount(dead, hw, hw)) - done)
        return replace(found, unindexed=unread)

    def error_group_ids(self, exc_type: str, message: str, offset: int, limit: int,
                        oldest_first: bool = False, until_ms: int | None = None
                        ) -> tuple[list[str], int]:
        self._sync_groups()
        total, ids = self._group_call("error_groups_page", group_id(exc_type, message),
                                      offset, limit, "asc" if oldest_first else "desc",
                                      "+inf" if until_ms is None else until_ms)
        return [as_text(i) for i in ids], int(total)
