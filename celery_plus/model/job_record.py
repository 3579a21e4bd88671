"""A job record with real field names: the typed view of ``Backend.job``'s text fields.

Every store answers ``job()`` with the same text fields, named as the Redis job hash
(``stores/redis/lua/lib.lua``); :meth:`JobRecord.of` reads them, here and nowhere else.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class JobRecord:
    """One job as its store keeps it (a field absent from the record reads as "" or 0)."""

    id: str
    #: enqueued, scheduled, blocked, running, completed, failed, canceled or discarded.
    state: str
    queue: str
    #: The task name.
    name: str
    #: The stored kombu envelope as text (bytes that are not UTF-8 decoded with U+FFFD).
    message: str
    #: Order in its queue: priority * rules.PRIORITY_FACTOR + sequence (lower first).
    score: int
    #: The token of the job's last claim (0: never claimed).
    lease_token: int
    #: Deliveries of the current message, and their limit (0: none).
    deliveries: int
    max_deliveries: int
    #: When it was published, is due (0: at once), started and ended (ms since the epoch;
    #: 0: not yet).
    enqueued_ms: int
    due_ms: int
    started_ms: int = 0
    finished_ms: int = 0
    #: The worker holding (or that last held) its claim.
    worker: str = ""
    #: Unique key, its window (pending, running or ttl) and its TTL (ms).
    unique_lock: str = ""
    unique_window: str = ""
    unique_ttl_ms: int = 0
    concurrency_group: str = ""
    concurrency_limit: int = 0
    #: Cluster rate limit: at most ``rate_limit`` starts of ``rate_group`` per window.
    rate_group: str = ""
    rate_limit: int = 0
    rate_window_ms: int = 0
    #: Why it ended as it did (dead letter, coalesced, canceled), and its last error.
    reason: str = ""
    exc_type: str = ""
    exc_message: str = ""
    traceback: str = ""
    #: One entry per attempt, oldest first.
    history: tuple[dict[str, Any], ...] = ()

    @classmethod
    def of(cls, job_id: str, fields: Mapping[str, str]) -> JobRecord:
        """The record of ``job_id`` from the text fields ``Backend.job`` returns."""

        def count(name: str) -> int:
            return int(fields.get(name) or 0)

        return cls(
            id=job_id, state=fields.get("st", ""), queue=fields.get("q", ""),
            name=fields.get("name", ""), message=fields.get("msg", ""), score=count("score"),
            lease_token=count("tok"), deliveries=count("dl"), max_deliveries=count("mdl"),
            enqueued_ms=count("enq"), due_ms=count("due"), started_ms=count("start"),
            finished_ms=count("fin"), worker=fields.get("wk", ""),
            unique_lock=fields.get("uk", ""), unique_window=fields.get("uw", ""),
            unique_ttl_ms=count("ut"), concurrency_group=fields.get("cg", ""),
            concurrency_limit=count("cl"), rate_group=fields.get("rg", ""),
            rate_limit=count("rl"), rate_window_ms=count("rw"),
            reason=fields.get("reason", ""), exc_type=fields.get("etype", ""),
            exc_message=fields.get("emsg", ""), traceback=fields.get("tb", ""),
            history=tuple(json.loads(fields.get("hist") or "[]")),
        )
