"""The sync of the admin's listing index of finished states on Redis (``lua/admin/index_*.lua``,
schema in ``index_sync.lua``): members of ``P:<I>`` are indexed by queue and task from the
index's high-water mark up (new members arrive at the top: their score is the clock when they
finished), a batch of :data:`SYNC_BATCH` per script call.

Dead letters are also indexed by the store itself when a job is dead-lettered
(``lib.lua``'s ``index_dead_letter``), once the index is caught up, so an admin read syncs
only the last second's members (the margin). A store of an earlier release has no index: the
workers' maintenance turn builds it (:func:`build_dead_letters`, bounded per turn), so the
operator's first filtered read does not (3.4 s at 100,000 dead letters, issue #28).
"""

from __future__ import annotations

import itertools
from typing import Any

from celery_plus.model.admin import as_text

#: Index members a sync reads per script call (bounds the time Redis is busy).
SYNC_BATCH = 5000
#: A sync re-reads members finished this long below the highest one indexed (a clock step).
SYNC_MARGIN_MS = 1000
#: Members of ``P:dead`` a maintenance turn indexes at most while the index is being built
#: (about 35 ms of Redis time at 34 µs a member; measured in docs/admin.md "Cost").
BUILD_PER_TURN = 1000


def sync(client: Any, prefix: str, script: Any, index: str, batches: int | None = None,
         batch: int | None = None) -> bool:
    """Index the members of ``P:<index>`` finished since the last sync, ``batch`` a script
    call (``script``: ``index_sync.lua`` registered on ``client``), at most ``batches`` calls
    (None: until caught up). True once caught up; a bounded sync that stopped short keeps
    where it stopped in ``P:ax:<index>:next`` ("<score> <members done at it>") and the next
    sync resumes there (not at the mark's margin, which may hold more members than a batch)."""
    batch = SYNC_BATCH if batch is None else batch
    next_key = f"{prefix}:ax:{index}:next"
    resume = client.get(next_key)
    low: str | int
    skip = 0
    if resume is not None:
        low, skip = (int(part) for part in as_text(resume).split())
    else:
        hw = client.get(f"{prefix}:ax:{index}:hw")
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
    top = client.zrevrange(f"{prefix}:{index}", 0, 0, withscores=True)
    if not top:
        return True
    hw = client.get(f"{prefix}:ax:{index}:hw")
    return (hw is not None and int(hw) >= top[0][1]
            and not client.exists(f"{prefix}:ax:{index}:next"))


def build_dead_letters(client: Any, prefix: str, script: Any) -> bool:
    """One maintenance turn's step of building the dead letters' index of a store that has
    none (or fell behind): at most :data:`BUILD_PER_TURN` members; nothing when caught up.
    True once caught up."""
    if caught_up(client, prefix, "dead"):
        return True
    return sync(client, prefix, script, "dead", batches=1, batch=BUILD_PER_TURN)
