"""A job's row in the ``jobs`` table of the two SQL stores, read as the record every store shows
(the field names of ``stores/redis/lua/lib.lua``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

#: Record field -> ``jobs`` column, the same in PostgreSQL and SQLite.
FIELDS: Mapping[str, str] = {
    "st": "state", "q": "queue", "name": "name", "msg": "msg", "tok": "token",
    "dl": "deliveries", "mdl": "max_deliveries", "uk": "unique_lock", "uw": "unique_window",
    "ut": "unique_ttl_ms", "cg": "conc_group", "cl": "conc_limit", "due": "due_ms",
    "enq": "enqueued_ms", "start": "started_ms", "fin": "finished_ms", "wk": "worker",
    "reason": "reason", "etype": "exc_type", "emsg": "exc_message", "tb": "traceback",
    "hist": "history", "score": "score", "rg": "rate_group", "rl": "rate_limit",
    "rw": "rate_window_ms",
}


def record_of(fields: Iterable[str], row: Sequence[Any]) -> dict[str, str]:
    """``row`` (one value per field, in order) as text fields; NULL columns left out."""
    out: dict[str, str] = {}
    for name, value in zip(fields, row, strict=True):
        if value is None:
            continue
        out[name] = (bytes(value).decode(errors="replace")
                     if isinstance(value, (bytes, memoryview)) else str(value))
    return out
