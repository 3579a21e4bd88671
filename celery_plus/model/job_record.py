"""A job record with real field names: what every store answers ``Backend.record`` with.

Each store builds it from its own fields (the Redis job hash, the SQL stores' ``jobs``
columns, the in-process store's ``Job``); everyone outside a store reads its attributes,
never the store's field names.
"""

from __future__ import annotations

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
    #: A listing row's: the size of its message (bytes as published) when the store read
    #: the size instead of a large message; 0 when not read. A whole record leaves it 0.
    message_size: int = 0
    #: The worker's start mark of the current claim: ``lease_token`` = its task started at
    #: ``started_ms``; ``-lease_token`` = not started yet (reserved); anything else: not
    #: known (``started_ms`` is the claim's time, as before start marks).
    start_mark: int = 0
    #: Blocked because its cluster rate group's window was full (not behind a concurrency
    #: group).
    rate_parked: bool = False

    @property
    def reserved(self) -> bool:
        """Running in the store, but its worker said its task has not started yet."""
        return (self.state == "running" and self.lease_token > 0
                and self.start_mark == -self.lease_token)


def as_text(value: Any) -> str:
    """A stored value as text ('' for None; bytes decoded, bad bytes replaced)."""
    if value is None:
        return ""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode(errors="replace")
    return str(value)
