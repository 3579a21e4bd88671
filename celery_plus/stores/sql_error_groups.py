"""Dead letters grouped by error on the SQL stores: an expression index and a GROUP BY.

Each dialect spells the group's normalized message (``model/error_groups.py``: the first line,
its first 200 characters) as an SQL expression, and its schema has a partial index on
``(exc_type, that expression, finished_ms) WHERE state = 'failed'`` (SQLite ``schema.sql``,
PostgreSQL migration ``0010_error_groups.sql``) whose expressions the statements here repeat
word for word, so that the planner uses it. Reads are bounded like every SQL count (capped at
``COUNT_CAP``): the groups are found among the newest ``CAPPED`` dead letters (one aggregate
over them; exact when there are fewer), then each group found is counted (capped), and its
oldest and newest looked up, on that index; a group's members are one range of it.
"""

from __future__ import annotations

from typing import Any, ClassVar

from celery_plus.model.capped import CAPPED
from celery_plus.model.error_groups import ErrorGroup, ErrorGroups, ordered

#: No finish time is later (a bigint).
MAX_MS = 2**62


class SqlErrorGroups:
    """``error_groups`` / ``error_group_ids`` for an SQL store's admin (a mixin of
    :class:`~celery_plus.stores.sql_admin.SqlAdmin`)."""

    #: The dialect's group type and normalized message expressions (as the index spells them).
    GROUP_TYPE: ClassVar[str]
    GROUP_MESSAGE: ClassVar[str]
    MARK: ClassVar[str]
    ID: ClassVar[str]

    def _all(self, sql: str, *params: Any) -> list[Any]:
        raise NotImplementedError

    def error_groups(self, limit: int) -> ErrorGroups:
        # The groups of the newest CAPPED dead letters (read through jobs_by_finish_id): with
        # fewer dead letters than that, the whole answer in one statement.
        rows = self._all(
            f"SELECT t, m, count(*), min(f), max(f) FROM (SELECT {self.GROUP_TYPE} AS t, "
            f"{self.GROUP_MESSAGE} AS m, finished_ms AS f FROM jobs WHERE state = 'failed' "
            f"ORDER BY finished_ms DESC LIMIT {CAPPED}) AS newest GROUP BY t, m")
        found = [ErrorGroup(str(t), str(m), int(n), int(lo or 0), int(hi or 0))
                 for t, m, n, lo, hi in rows]
        if sum(g.count for g in found) < CAPPED:
            return ordered(found, limit)
        # More: each of the groups found counted (capped) and timed on jobs_error_groups.
        where = self._group_where()
        exact = []
        for group in ordered(found, limit).groups:
            key = (group.exc_type, group.message)
            [(n, lo, hi)] = self._all(
                f"SELECT (SELECT count(*) FROM (SELECT 1 FROM jobs WHERE {where} LIMIT "
                f"{CAPPED}) AS c), (SELECT min(finished_ms) FROM jobs WHERE {where}), "
                f"(SELECT max(finished_ms) FROM jobs WHERE {where})", *key, *key, *key)
            exact.append(ErrorGroup(*key, int(n), int(lo or 0), int(hi or 0)))
        return ErrorGroups(ordered(exact, limit).groups, len(found), sampled=CAPPED)

    def _group_where(self) -> str:
        """The rows of one group (parameters: its type and message)."""
        return (f"state = 'failed' AND {self.GROUP_TYPE} = {self.MARK} AND "
                f"{self.GROUP_MESSAGE} = {self.MARK}")

    def error_group_ids(self, exc_type: str, message: str, offset: int, limit: int,
                        oldest_first: bool = False, until_ms: int | None = None
                        ) -> tuple[list[str], int]:
        mark = self.MARK
        where = f"{self._group_where()} AND finished_ms <= {mark}"
        params = (exc_type, message, MAX_MS if until_ms is None else until_ms)
        direction = "ASC" if oldest_first else "DESC"
        total = int(self._all(
            f"SELECT count(*) FROM (SELECT 1 FROM jobs WHERE {where} LIMIT {CAPPED}) AS c",
            *params)[0][0])
        ids = self._all(f"SELECT id FROM jobs WHERE {where} ORDER BY finished_ms {direction}, "
                        f"{self.ID} {direction} LIMIT {mark} OFFSET {mark}",
                        *params, limit, offset)
        return [str(row[0]) for row in ids], total
