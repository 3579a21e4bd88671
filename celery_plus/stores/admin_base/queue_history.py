"""The queue history: per queue, how many jobs wait and since when the oldest waits, sampled
once a minute and kept a day (docs/admin.md, "Queue depth and wait over time").

Who samples: the worker whose maintenance turn won the interval (``LeaseKeeper.maintain``:
one worker per ``plus_maintenance_interval`` cluster-wide) calls :func:`record_sample`; it
writes at most one sample per :data:`STEP_MS` bucket of the store's clock (the store keeps
the first writer's, so two workers racing in one bucket leave one sample) and drops samples
older than :data:`RETENTION_MS`. The admin reads them (and adds a sample of its own for
"now": ``admin/queue_history.py``).

A sample is the JSON ``{"queue": [enqueued jobs, ms since when its oldest waits or null]}``
of at most :data:`MAX_QUEUES` queues (the deepest), so a store keeps at most
``RETENTION_MS / STEP_MS`` small rows whatever the traffic.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

#: One sample per minute of the store's clock.
STEP_MS = 60_000
#: Samples are kept a day.
RETENTION_MS = 86_400_000
#: Queues one sample keeps (the deepest).
MAX_QUEUES = 100

#: Per queue: (queue, enqueued jobs, since when its oldest enqueued job waits (ms) or None).
DepthRow = tuple[str, int, int | None]


class HistoryStore(Protocol):
    """What :func:`record_sample` needs of a store's admin."""

    keeps_history: bool

    def now_ms(self) -> int: ...

    def queue_depth_rows(self) -> Iterable[DepthRow]: ...

    def history_rows(self, since_ms: int, until_ms: int) -> list[tuple[int, int, str]]: ...

    def history_put(self, bucket_ms: int, at_ms: int, sample: str, keep_from_ms: int
                    ) -> bool: ...


def encode(rows: Iterable[DepthRow]) -> str:
    """A sample's JSON: the MAX_QUEUES deepest queues (ties by name)."""
    kept = sorted(rows, key=lambda row: (-int(row[1]), row[0]))[:MAX_QUEUES]
    return json.dumps({q: [int(n), None if at is None else int(at)] for q, n, at in kept},
                      separators=(",", ":"), sort_keys=True)


def decode(sample: str) -> dict[str, tuple[int, int | None]]:
    """A sample's queues: {queue: (enqueued jobs, oldest waiting since ms or None)}; a sample
    that is not such JSON reads as empty (never an error on a page)."""
    try:
        raw: Any = json.loads(sample)
    except ValueError:
        return {}
    if not isinstance(raw, Mapping):
        return {}
    out: dict[str, tuple[int, int | None]] = {}
    for queue, value in raw.items():
        if (isinstance(value, list) and len(value) == 2 and isinstance(value[0], int)
                and (value[1] is None or isinstance(value[1], int))):
            out[str(queue)] = (value[0], value[1])
    return out


def record_sample(admin: HistoryStore, step_ms: int = STEP_MS,
                  retention_ms: int = RETENTION_MS) -> bool:
    """Write this bucket's sample unless the store has it; True if this call wrote it."""
    if not admin.keeps_history:
        return False
    now = admin.now_ms()
    bucket = now - now % step_ms
    if admin.history_rows(bucket, bucket):
        return False  # another worker's turn sampled this bucket already
    return admin.history_put(bucket, now, encode(admin.queue_depth_rows()),
                             now - retention_ms)


__all__ = ["MAX_QUEUES", "RETENTION_MS", "STEP_MS", "DepthRow", "HistoryStore", "decode",
           "encode", "record_sample"]
