"""Dead letters grouped by error on the SQL stores: an expression index and a GROUP BY.

Each dialect spells the group's normalized message (``model/error_groups.py``: the first line,
its first 200 characters) as an SQL expression, and its schema has a partial index on
``(exc_type, that expression, finished_ms) WHERE state = 'failed'`` (SQLite ``schema.sql``,
PostgreSQL migration ``0010_error_groups.sql``) whose expressions the statements here repeat
word for word, so that the planner uses it: the groups are one aggregate over that index (never
the table's rows), and a group's members one range of it, newest (or oldest) first.
"""

from __future__ import annotations

from typing import Any, ClassVar

from celery_plus.model.capped import CAPPED
from celery_plus.model.error_groups import ErrorGroup, ErrorGroups, ordered

#: The group's exception type as every statement (and the index) spells it.
EXC_TYPE = "COALESCE(exc_type, '')"
#: No finish time is later (a bigint).
MAX_MS = 2**62


class SqlErrorGroups:
    """``error_groups`` / ``error_group_ids`` for an SQL store's admin (a mixin of
    :class:`~celery_plus.stores.sql_admin.SqlAdmin`)."""

    #: The dialect's normalized message expression (as the index spells it).
    GROUP_MESSAGE: ClassVar[str]
    MARK: ClassVar[str]
    ID: ClassVar[str]

    def _all(self, sql: str, *params: Any) -> list[Any]:
        raise NotImplementedError

    def error_groups(self, limit: int) -> ErrorGroups:
        rows = self._all(
            f"SELECT {EXC_TYPE}, {self.GROUP_MESSAGE}, count(*), min(finished_ms), "
            f"max(finished_ms) FROM jobs WHERE state = 'failed' GROUP BY 1, 2")
        return ordered([ErrorGroup(str(t), str(m), int(n), int(lo or 0), int(hi or 0))
                        for t, m, n, lo, hi in rows], limit)

    def error_group_ids(self, exc_type: str, message: str, offset: int, limit: int,
                        oldest_first: bool = False, until_ms: int | None = None
                        ) -> tuple[list[str], int]:
        mark = self.MARK
        where = (f"state = 'failed' AND {EXC_TYPE} = {mark} AND {self.GROUP_MESSAGE} = {mark} "
                 f"AND finished_ms <= {mark}")
        params = (exc_type, message, MAX_MS if until_ms is None else until_ms)
        direction = "ASC" if oldest_first else "DESC"
        total = int(self._all(
            f"SELECT count(*) FROM (SELECT 1 FROM jobs WHERE {where} LIMIT {CAPPED}) AS c",
            *params)[0][0])
        ids = self._all(f"SELECT id FROM jobs WHERE {where} ORDER BY finished_ms {direction}, "
                        f"{self.ID} {direction} LIMIT {mark} OFFSET {mark}",
                        *params, limit, offset)
        return [str(row[0]) for row in ids], total
