"""A job's row in the ``jobs`` table of the two SQL stores, read as a
:class:`~celery_plus.model.job_record.JobRecord` straight from its columns."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from celery_plus.model.job_record import JobRecord, as_text

#: The ``jobs`` columns of a whole record, the same in PostgreSQL and SQLite.
COLUMNS: tuple[str, ...] = (
    "state", "queue", "name", "msg", "score", "token", "deliveries", "max_deliveries",
    "enqueued_ms", "due_ms", "started_ms", "finished_ms", "worker", "unique_lock",
    "unique_window", "unique_ttl_ms", "conc_group", "conc_limit", "rate_group", "rate_limit",
    "rate_window_ms", "reason", "exc_type", "exc_message", "traceback", "history",
    "start_mark", "rate_parked",
)


def _count(value: Any) -> int:
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def _history(value: Any) -> tuple[dict[str, Any], ...]:
    if isinstance(value, list):
        return tuple(value)
    try:
        entries = json.loads(as_text(value) or "[]")
    except ValueError:
        return ()
    return tuple(entries) if isinstance(entries, list) else ()


def job_record(job_id: str, row: Mapping[str, Any]) -> JobRecord:
    """The record of ``job_id`` from (some of) its columns by name (NULL or absent: "" or
    0); ``msg_size``: the size of a message a listing read instead of the message."""
    text = {c: as_text(row.get(c)) for c in ("state", "queue", "name", "msg", "worker",
                                          "unique_lock", "unique_window", "conc_group",
                                          "rate_group", "reason", "exc_type", "exc_message",
                                          "traceback")}
    count = {c: _count(row.get(c)) for c in (
        "score", "token", "deliveries", "max_deliveries", "enqueued_ms", "due_ms",
        "started_ms", "finished_ms", "unique_ttl_ms", "conc_limit", "rate_limit",
        "rate_window_ms", "msg_size", "start_mark")}
    return JobRecord(
        id=job_id, state=text["state"], queue=text["queue"], name=text["name"],
        message=text["msg"], score=count["score"], lease_token=count["token"],
        deliveries=count["deliveries"], max_deliveries=count["max_deliveries"],
        enqueued_ms=count["enqueued_ms"], due_ms=count["due_ms"],
        started_ms=count["started_ms"], finished_ms=count["finished_ms"],
        worker=text["worker"], unique_lock=text["unique_lock"],
        unique_window=text["unique_window"], unique_ttl_ms=count["unique_ttl_ms"],
        concurrency_group=text["conc_group"], concurrency_limit=count["conc_limit"],
        rate_group=text["rate_group"], rate_limit=count["rate_limit"],
        rate_window_ms=count["rate_window_ms"], reason=text["reason"],
        exc_type=text["exc_type"], exc_message=text["exc_message"],
        traceback=text["traceback"], history=_history(row.get("history")),
        message_size=count["msg_size"], start_mark=count["start_mark"],
        rate_parked=bool(row.get("rate_parked")),
    )


def row_record(job_id: str, columns: Sequence[str], row: Sequence[Any]) -> JobRecord:
    """:func:`job_record` of ``row``, one value per name of ``columns``, in order."""
    return job_record(job_id, dict(zip(columns, row, strict=True)))
