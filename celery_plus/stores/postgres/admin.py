"""The admin on the PostgreSQL store: each change is ONE PL/pgSQL function call.

The functions (``admin_retry``, ``admin_discard``, ``admin_cancel``, ``admin_purge``) are in
``stores/postgres/functions/admin_*.sql``, applied by the store's migrator: each is one
transaction (one round trip on the :class:`~celery_plus.stores.postgres.backend.
PostgresBackend`'s pool) that locks the job's row with ``FOR UPDATE`` and re-checks its state
before changing it, so concurrent operations on one job have one winner and a repeat is a
no-op that says so. The rules are the Redis admin scripts'
(``stores/redis/lua/admin/*.lua``) and ``stores/sqlite/admin.py``'s, with the same replies
(see :mod:`celery_plus.stores.admin_base.orchestration`). The orchestration and what both SQL stores
read alike are :class:`~celery_plus.stores.sql_admin.SqlAdmin`'s.

:func:`~celery_plus.admin.api.admin_for` picks it for a :class:`PostgresBackend`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from celery_plus.model.admin import Scope
from celery_plus.stores.admin_base.orchestration import Outcome
from celery_plus.stores.postgres.backend import PostgresBackend
from celery_plus.stores.sql_admin import Listing, SqlAdmin, summary_columns
from celery_plus.stores.sql_error_groups import SqlErrorGroups

_RETRY = ("SELECT * FROM admin_retry(%s::text[], %s::text, %s::text, %s::bigint, "
          "%s::bigint)")
_PURGE = "SELECT * FROM admin_purge(%s, %s::text[], %s::text, %s::text, %s::bigint)"


class PostgresAdmin(SqlErrorGroups, SqlAdmin[PostgresBackend]):
    """:class:`~celery_plus.model.admin.AdminStore` on a :class:`PostgresBackend`'s schema."""

    MARK = "%s"
    # Byte order, as Redis and the in-process store compare ids.
    ID = 'id COLLATE "C"'
    KEYSET = '(%s::bigint, %s COLLATE "C")'
    GREATEST = "greatest"
    SUMMARY = summary_columns("j.", "octet_length({})")
    # (migration 0010's jobs_error_groups spells it the same)
    GROUP_TYPE = "left(COALESCE(exc_type, ''), 200)"
    GROUP_MESSAGE = "left(split_part(COALESCE(exc_message, ''), E'\\n', 1), 200)"

    def _all(self, sql: str, *params: Any) -> list[Any]:
        return self.backend._rows(sql, params)

    # -- listings -----------------------------------------------------------------------
    def _page_sql(self, state: str, listing: Listing) -> str:
        # Deferred join: order and page the ids only (an index scan), then read the page's
        # rows (long texts cut in SQL).
        order = f"{listing.at} {listing.direction}, {self.ID} {listing.direction}"
        page = (f"SELECT id, {listing.at} AS at FROM jobs WHERE {listing.condition} "
                f"ORDER BY {order} LIMIT %s OFFSET %s")
        return (f"SELECT {self.SUMMARY[1]} FROM ({page}) p JOIN jobs j ON j.id = p.id "
                f'ORDER BY p.at {listing.direction}, p.id COLLATE "C" {listing.direction}')

    def _among(self, ids: Sequence[str]) -> tuple[str, list[Any]]:
        return "id = ANY (%s::text[])", [list(ids)]

    def history_put(self, bucket_ms: int, at_ms: int, sample: str, keep_from_ms: int
                    ) -> bool:
        # One statement: the sample inserted unless its bucket has one, the old ones dropped.
        [(stored,)] = self._all(
            "WITH old AS (DELETE FROM queue_history WHERE bucket_ms < %s::bigint), "
            "ins AS (INSERT INTO queue_history (bucket_ms, at_ms, sample) VALUES "
            "(%s::bigint, %s::bigint, %s) ON CONFLICT (bucket_ms) DO NOTHING RETURNING 1) "
            "SELECT count(*) FROM ins", keep_from_ms, bucket_ms, at_ms, sample)
        return bool(stored)

    def holder(self, lock: str) -> str | None:
        holder = self._all("SELECT live_holder(store_key(%s), now_ms())", lock)[0][0]
        return None if holder is None else str(holder)

    # -- changes (one function call each: the row locked, its state re-checked) ---------
    def retry_batch(self, ids: Sequence[str], scope: Scope) -> list[Outcome]:
        rows = self._all(_RETRY, list(ids), scope.task, scope.queue, scope.older_than_ms,
                         self.backend.backstop_ms)
        return [(str(i), str(outcome), str(extra)) for i, outcome, extra in rows]

    def discard_one(self, job_id: str) -> Outcome:
        outcome, extra = self._all("SELECT * FROM admin_discard(%s)", job_id)[0]
        return job_id, str(outcome), str(extra)

    def cancel_one(self, job_id: str) -> Outcome:
        outcome, extra = self._all("SELECT * FROM admin_cancel(%s)", job_id)[0]
        return job_id, str(outcome), str(extra)

    def discard_batch(self, ids: Sequence[str]) -> list[Outcome]:
        return self._each_in_one("admin_discard", ids)

    def cancel_batch(self, ids: Sequence[str]) -> list[Outcome]:
        return self._each_in_one("admin_cancel", ids)

    def _each_in_one(self, function: str, ids: Sequence[str]) -> list[Outcome]:
        """``function`` (admin_discard or admin_cancel: each locks its job's row and
        re-checks it) on each of ``ids`` in ONE statement, one round trip and transaction for
        the batch: one call per job took 3-9 ms apiece (37 s for a group of 4,286 dead
        letters at 100,000 on a loaded machine)."""
        rows = self._all(f"SELECT u.id, f.o_outcome, f.o_extra FROM unnest(%s::text[]) WITH "
                         f"ORDINALITY AS u(id, n) CROSS JOIN LATERAL {function}(u.id) f "
                         "ORDER BY u.n", list(ids))
        return [(str(i), str(outcome), str(extra)) for i, outcome, extra in rows]

    def purge_batch(self, state: str, ids: Sequence[str], scope: Scope) -> list[str]:
        return [str(row[0]) for row in self._all(_PURGE, state, list(ids), scope.task,
                                                 scope.queue, scope.older_than_ms)]

