"""What the two SQL stores' inspectors share: a ``jobs`` row read as the Redis job hash."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

#: Redis job hash field -> ``jobs`` column, the same in PostgreSQL and SQLite.
FIELDS: Mapping[str, str] = {
    "st": "state", "q": "queue", "name": "name", "msg": "msg", "tok": "token",
    "dl": "deliveries", "mdl": "max_deliveries", "uk": "unique_lock", "uw": "unique_window",
    "ut": "unique_ttl_ms", "cg": "conc_group", "cl": "conc_limit", "due": "due_ms",
    "enq": "enqueued_ms", "start": "started_ms", "fin": "finished_ms", "wk": "worker",
    "reason": "reason", "etype": "exc_type", "emsg": "exc_message", "tb": "traceback",
    "hist": "history", "score": "score", "rg": "rate_group", "rl": "rate_limit",
    "rw": "rate_window_ms",
}

#: ``ids_in_state``'s order per state: that of the Redis store's index of the state.
ORDER = {"completed": "finished_ms", "failed": "finished_ms", "canceled": "finished_ms",
         "discarded": "finished_ms", "running": "lease_expires_ms", "scheduled": "due_ms",
         "enqueued": "score", "blocked": "score"}


def record_of(fields: Iterable[str], row: Sequence[Any]) -> dict[str, str]:
    """``row`` (one value per field, in order) as text fields; NULL columns left out."""
    out: dict[str, str] = {}
    for name, value in zip(fields, row, strict=True):
        if value is None:
            continue
        out[name] = (bytes(value).decode(errors="replace")
                     if isinstance(value, (bytes, memoryview)) else str(value))
    return out
