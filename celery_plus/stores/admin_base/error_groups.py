"""Dead letters grouped by error, read from whole records: the in-process store's way.

:class:`RecordErrorGroups` groups the ``failed`` records the admin's ``candidates`` yields (every
one of them: the in-process store holds them in memory anyway). The stores that must not read
every dead letter per page keep an index instead (``stores/sql_error_groups.py``,
``stores/redis/error_groups.py``) with the same two methods.
"""

from __future__ import annotations

from collections.abc import Iterable

from celery_plus.model.admin import Query
from celery_plus.model.error_groups import (
    ErrorGroup,
    ErrorGroups,
    group_type,
    normalize,
    ordered,
)
from celery_plus.stores.admin_base.listing import Record


class RecordErrorGroups:
    """``error_groups`` / ``error_group_ids`` over :meth:`candidates` (a mixin of a
    :class:`~celery_plus.stores.admin_base.orchestration.StoreAdmin`)."""

    def candidates(self, state: str, query: Query) -> Iterable[Record]:
        raise NotImplementedError

    def error_groups(self, limit: int) -> ErrorGroups:
        found: dict[tuple[str, str], list[int]] = {}
        for rec in self.candidates("failed", Query()):
            key = (group_type(rec.exc_type), normalize(rec.exc_message))
            at = rec.finished_ms or 0
            row = found.setdefault(key, [0, at, at])
            row[0] += 1
            row[1], row[2] = min(row[1], at), max(row[2], at)
        return ordered([ErrorGroup(t, m, n, lo, hi) for (t, m), (n, lo, hi) in found.items()],
                       limit)

    def error_group_ids(self, exc_type: str, message: str, offset: int, limit: int,
                        oldest_first: bool = False, until_ms: int | None = None
                        ) -> tuple[list[str], int]:
        query = Query(oldest_first=oldest_first, until_ms=until_ms)
        ids = [rec.id for rec in self.candidates("failed", query)
               if group_type(rec.exc_type) == exc_type and normalize(rec.exc_message) == message]
        return ids[offset:offset + limit], len(ids)
