"""The sync of the admin's listing index of finished states on Redis (``lua/admin/index_*.lua``,
schema in ``index_sync.lua``): members of ``P:<I>`` are indexed by queue and task from the
index's high-water mark up (new members arrive at the top: their score is the clock when they
finished), a batch of :data:`SYNC_BATCH` per script call.

Dead letters are also indexed by the store itself when a job is dead-lettered
(``lib.lua``'s ``index_dead_letter``), once the index is caught up, so an admin read syncs
only the last second's members (the margin). A store of an earlier release has no index: the
workers' maintenance turn builds it (:func:`build_dead_letters`, bounded per turn), and an
admin read syncs at most :data:`READ_BATCHES` calls (:func:`sync`'s ``batches``): until the
index is caught up, a filtered read walks the state's own sorted set in a bounded, labelled
window instead (``RedisAdmin``; the first filtered read of 100,000 dead letters that built the
whole index took 0.8 s quiet and 7.6 s at load 24, issue #28).
"""

from __future__ import annotations

import itertools
from typing import Any

from celery_plus.model.admin import as_text

#: Index members a sync reads per script call (bounds the time Redis is busy).
SYNC_BATCH = 5000
#: A sync re-reads members finished this long below the highest one indexed (a clock step).
SYNC_MARGIN_MS = 1000
#: Sync calls (of SYNC_BATCH members) an admin read makes at most; a read that leaves the
#: index behind answers without it (docs/admin.md "Cost").
READ_BATCHES = 1
#: Members of ``P:dead`` a maintenance turn indexes at most while the index is being built
#: (about 35 ms of Redis time at 34 µs a member; measured in docs/admin.md "Cost").
BUILD_PER_TURN = 1000


def sync(client: Any, prefix: str, script: Any, index: str, batches: int | None = None,
         batch: int | None = None) -> bool:
    """Index the members of ``P:<index>`` finished since the last sync, ``batch`` a script
    call (``script``: ``index_sync.lua`` registered on ``client``), at most ``batches`` calls
    (None: until caught up). True once caught up; a bounded sync that stopped short keeps
    where it stopped in ``P:ax:<index>:next`` ("<score> <members done at it>") and the next
    sync resumes there (not at the mark's margin, which may hold more members than a batch).
    An index caught up reads nothing: re-reading the margin each time, a second holding more
    members than a read's bound would never let it be caught up."""
    batch = SYNC_BATCH if batch is None else batch
    next_key = f"{prefix}:ax:{index}:next"
    resume = client.get(next_key)
    low: str | int
    skip = 0
    if resume is not None:
        low, skip = (int(part) for part in as_text(resume).split())
    else:
        hw = client.get(f"{prefix}:ax:{index}:hw")
        if _at_top(client, prefix, index, hw):
            return True
        low = "-inf" if hw is None else int(hw) - SYNC_MARGIN_MS
    for _ in itertools.count() if batches is None else range(batches):
        read, high, at_high = script(keys=[prefix], args=[prefix, index, low, skip, batch])
        if int(read) < batch:
            if resume is not None:
                client.delete(next_key)
            return True
        # The next batch starts at the highest score read, past the members read there.
        high = int(as_text(high))
        skip = skip + int(read) if high == low else int(at_high)
        low = high
    client.set(next_key, f"{low} {skip}")
    return False


def caught_up(client: Any, prefix: str, index: str) -> bool:
    """Whether the index has every member of ``P:<index>``: the state empty, or its mark at
    the newest score and no bounded sync stopped midway (members sharing that score may be
    left then); what ``lib.lua``'s ``index_dead_letter`` checks before it adds one."""
    return (_at_top(client, prefix, index, client.get(f"{prefix}:ax:{index}:hw"))
            and not client.exists(f"{prefix}:ax:{index}:next"))


def _at_top(client: Any, prefix: str, index: str, hw: Any) -> bool:
    """Whether the mark ``hw`` (None: no mark) is at ``P:<index>``'s newest score (or the
    state is empty)."""
    top = client.zrevrange(f"{prefix}:{index}", 0, 0, withscores=True)
    return not top or (hw is not None and int(hw) >= top[0][1])


def unindexed(client: Any, prefix: str, index: str) -> int:
    """Members of ``P:<index>`` the index does not have yet: from where a bounded sync stopped
    (less those done at that score), else above the mark (all without one)."""
    src = f"{prefix}:{index}"
    resume = client.get(f"{prefix}:ax:{index}:next")
    if resume is not None:
        low, done = (int(part) for part in as_text(resume).split())
        return max(0, int(client.zcount(src, low, "+inf")) - done)
    hw = client.get(f"{prefix}:ax:{index}:hw")
    return int(client.zcard(src) if hw is None else client.zcount(src, f"({int(hw)}", "+inf"))


def build_dead_letters(client: Any, prefix: str, script: Any) -> bool:
    """One maintenance turn's step of building the dead letters' index of a store that has
    none (or fell behind): at most :data:`BUILD_PER_TURN` members; nothing when caught up.
    True once caught up."""
    if caught_up(client, prefix, "dead"):
        return True
    return sync(client, prefix, script, "dead", batches=1, batch=BUILD_PER_TURN)
