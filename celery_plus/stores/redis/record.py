"""A Redis job hash (``P:job:{id}``, field names as ``lua/lib.lua``) read as a
:class:`~celery_plus.model.job_record.JobRecord`: the one place that knows those names."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from celery_plus.model.job_record import JobRecord, as_text


def _history(text: str) -> tuple[dict[str, Any], ...]:
    try:
        entries = json.loads(text or "[]")
    except ValueError:
        return ()
    return tuple(entries) if isinstance(entries, list) else ()


def job_record(job_id: str, fields: Mapping[str, Any]) -> JobRecord:
    """The record of ``job_id`` from (some of) its hash's fields (an absent one reads as ""
    or 0); ``msglen``: the size of a message a listing read instead of the message."""

    def count(name: str) -> int:
        try:
            return int(as_text(fields.get(name)) or 0)
        except ValueError:
            return 0

    def text(name: str) -> str:
        return as_text(fields.get(name))

    return JobRecord(
        id=job_id, state=text("st"), queue=text("q"), name=text("name"),
        message=text("msg"), score=count("score"), lease_token=count("tok"),
        deliveries=count("dl"), max_deliveries=count("mdl"), enqueued_ms=count("enq"),
        due_ms=count("due"), started_ms=count("start"), finished_ms=count("fin"),
        worker=text("wk"), unique_lock=text("uk"), unique_window=text("uw"),
        unique_ttl_ms=count("ut"), concurrency_group=text("cg"), concurrency_limit=count("cl"),
        rate_group=text("rg"), rate_limit=count("rl"), rate_window_ms=count("rw"),
        reason=text("reason"), exc_type=text("etype"), exc_message=text("emsg"),
        traceback=text("tb"), history=_history(text("hist")), message_size=count("msglen"),
        start_mark=count("sm"), rate_parked=text("rp") == "1",
    )
