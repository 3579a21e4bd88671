"""What the SQL admin stores (``sqlite/admin.py``, ``postgres/admin.py``) read for a listing.

A listing row's long texts are cut in SQL and a large message is left out (its size is read
instead), as ``store.py``'s rules ask; a text search reads whole records.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ..admin.store import LIST_TEXT, PREVIEW_BYTES, SEARCH_CHUNK

#: Fetch the next chunk of a search after (time, id) ``last`` (None: the first chunk).
Fetch = Callable[[tuple[Any, Any] | None], Sequence[Sequence[Any]]]

#: What a text search reads of each record (whole: it searches all of them).
SEARCH_FIELDS = ("st", "name", "q", "enq", "due", "start", "fin", "dl", "reason", "etype",
                 "emsg", "msg", "tb")


def summary_columns(alias: str, byte_length: str) -> tuple[tuple[str, ...], str]:
    """(record field names, the SQL select list with the id first) of a listing row, the
    columns qualified by ``alias`` (``"j."`` or ``""``); ``byte_length`` is the dialect's
    byte length of the message column (``"octet_length({})"``)."""
    cut = f"substr({alias}{{}}, 1, {LIST_TEXT + 1})"
    size = byte_length.format(f"{alias}msg")
    fields = (("st", f"{alias}state"), ("name", cut.format("name")), ("q", cut.format("queue")),
              ("enq", f"{alias}enqueued_ms"), ("due", f"{alias}due_ms"),
              ("start", f"{alias}started_ms"), ("fin", f"{alias}finished_ms"),
              ("dl", f"{alias}deliveries"), ("reason", cut.format("reason")),
              ("etype", cut.format("exc_type")), ("emsg", cut.format("exc_message")),
              ("msg", f"CASE WHEN {size} <= {PREVIEW_BYTES} THEN {alias}msg END"),
              ("msglen", size))
    return (tuple(name for name, _ in fields),
            ", ".join([f"{alias}id", *(sql for _, sql in fields)]))


def keyset_search(fetch: Fetch, text_limit: int | None,
                  record: Callable[[Sequence[str], Sequence[Any]], dict[str, Any]]
                  ) -> Iterator[tuple[str, dict[str, Any]]]:
    """Whole records of a text search, in the listing's order, SEARCH_CHUNK at a time:
    ``fetch(last)`` returns rows (id, time, *SEARCH_FIELDS) after ``last`` = (time, id) of
    the previous chunk's last row (keyset paging). Memory: one chunk, however large the
    records; stops after ``text_limit`` records."""
    last: tuple[Any, Any] | None = None
    seen = 0
    while text_limit is None or seen < text_limit:
        rows = fetch(last)
        for row in rows:
            seen += 1
            yield row[0], record(SEARCH_FIELDS, row[2:])
        if len(rows) < SEARCH_CHUNK:
            return
        last = (rows[-1][1], rows[-1][0])
