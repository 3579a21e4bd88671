"""The admin on the PostgreSQL store: each change is ONE PL/pgSQL function call.

The functions (``admin_retry``, ``admin_discard``, ``admin_cancel``, ``admin_purge``) are in
``stores/postgres/sql/0002_admin.sql``, applied by the store's migrations: each is one
transaction (one round trip on the :class:`~celery_plus.stores.postgres.backend.
PostgresBackend`'s pool) that locks the job's row with ``FOR UPDATE`` and re-checks its state
before changing it, so concurrent operations on one job have one winner and a repeat is a
no-op that says so. The rules are the Redis admin scripts'
(``stores/redis/lua/admin/*.lua``) and ``stores/sqlite/admin.py``'s, with the same replies (see
:func:`~celery_plus.admin.store.op_result`).

Registered for :class:`PostgresBackend` with :func:`~celery_plus.admin.api.register_admin`
when this module is imported (``celery_plus.admin`` imports it).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from ...admin.api import register_admin
from ...admin.store import (
    PURGEABLE,
    SEARCH_CHUNK,
    STATES,
    BulkResult,
    Counts,
    JobDetail,
    JobSummary,
    OpResult,
    Query,
    RetryConflict,
    Scope,
    Status,
    WorkerLeases,
    batches,
    bulk_result,
    check_scope,
    check_state,
    detail_from_record,
    histogram,
    op_result,
    status_from_rows,
    summary_from_record,
    text_page,
    time_field,
)
from ..sql_rows import SEARCH_FIELDS, keyset_search, summary_columns
from .backend import FIELDS, PostgresBackend

_SUMMARY_NAMES, _SUMMARY_COLUMNS = summary_columns("j.", "octet_length({})")

_RETRY = ("SELECT * FROM admin_retry(%s::text[], %s::text, %s::text, %s::bigint, "
          "%s::bigint)")
_PURGE = "SELECT * FROM admin_purge(%s, %s::text[], %s::text, %s::text, %s::bigint)"


def _record(fields: Sequence[str], row: Sequence[Any]) -> dict[str, Any]:
    """A row as a record with the Redis hash's field names (NULL columns left out)."""
    return {f: (bytes(v) if isinstance(v, memoryview) else v)
            for f, v in zip(fields, row, strict=True) if v is not None}


class PostgresAdmin:
    """:class:`~celery_plus.admin.store.AdminStore` on a :class:`PostgresBackend`'s schema."""

    def __init__(self, backend: PostgresBackend, *, owns_backend: bool = False) -> None:
        self.backend = backend
        self._owns = owns_backend

    def now_ms(self) -> int:
        return self.backend.now_ms()

    def close(self) -> None:
        if self._owns:
            self.backend.close()

    def _all(self, sql: str, *params: Any) -> list[Any]:
        return self.backend._rows(sql, params)

    # -- reads --------------------------------------------------------------------------
    def counts(self) -> Counts:
        # One count per state, the state spelled literally: each is served by that state's
        # partial index (0001_initial.sql) instead of a scan of the whole table.
        sql = " UNION ALL ".join(
            f"SELECT '{state}', count(*) FROM jobs WHERE state = '{state}'" for state in STATES)
        return Counts(**{state: int(n) for state, n in self._all(sql)})

    def jobs(self, state: str, query: Query, offset: int, limit: int
             ) -> tuple[list[JobSummary], int]:
        check_state(state)
        finished = state in PURGEABLE
        # Finished records always have a finish time: the bare column lets the partial index
        # jobs_finished (state, finished_ms, id) order them; other states may lack theirs.
        column = (FIELDS[time_field(state)] if finished
                  else f"COALESCE({FIELDS[time_field(state)]}, 0)")
        # The state spelled literally (it is one of STATES) so that the planner may use the
        # partial indexes, whose predicates name the states.
        where: list[str] = [f"state = '{state}'"]
        params: list[Any] = []
        for value, clause in ((query.task, "name = %s"), (query.queue, "queue = %s"),
                              (query.since_ms, f"{column} >= %s"),
                              (query.until_ms, f"{column} <= %s")):
            if value is not None:
                where.append(clause)
                params.append(value)
        condition = " AND ".join(where)
        direction = "ASC" if query.oldest_first else "DESC"
        if query.text:
            return text_page(self._search(condition, params, column, direction,
                                          query.text_limit), query, offset, limit)
        total = self._all(f"SELECT count(*) FROM jobs WHERE {condition}", *params)[0][0]
        # Deferred join: order and page the ids only (an index scan), then read the page's
        # rows (long texts cut in SQL), as stores/sqlite/admin.py does.
        order = f'{column} {direction}, id COLLATE "C" {direction}'
        page = (f"SELECT id, {column} AS at FROM jobs WHERE {condition} ORDER BY {order} "
                "LIMIT %s OFFSET %s")
        rows = self._all(f"SELECT {_SUMMARY_COLUMNS} FROM ({page}) p JOIN jobs j ON j.id = p.id "
                         f'ORDER BY p.at {direction}, p.id COLLATE "C" {direction}',
                         *params, limit, offset)
        return ([summary_from_record(row[0], _record(_SUMMARY_NAMES, row[1:])) for row in rows],
                int(total))

    def _search(self, condition: str, params: list[Any], column: str, direction: str,
                text_limit: int | None) -> Iterator[tuple[str, dict[str, Any]]]:
        """Whole records of a text search (:func:`~.sql_rows.keyset_search`)."""
        columns = ", ".join(["id", f"{column} AS at", *(FIELDS[f] for f in SEARCH_FIELDS)])
        after = "<" if direction == "DESC" else ">"

        def fetch(last: tuple[Any, Any] | None) -> list[Any]:
            keyset = ("" if last is None else
                      f' AND ({column}, id COLLATE "C") {after} (%s::bigint, %s COLLATE "C")')
            return self._all(f"SELECT {columns} FROM jobs WHERE {condition}{keyset} ORDER BY "
                             f'{column} {direction}, id COLLATE "C" {direction} '
                             f"LIMIT {SEARCH_CHUNK}", *params, *(last or ()))

        return keyset_search(fetch, text_limit, _record)

    def show(self, job_id: str) -> JobDetail | None:
        rec = self.backend.job(job_id)
        if rec is None:
            return None
        lock = rec.get("uk") or ""
        holder = self.backend.holder(lock) if lock else None
        return detail_from_record(job_id, rec, holder)

    # -- changes (one function call each: the row locked, its state re-checked) ---------
    def _retry(self, ids: Sequence[str], scope: Scope) -> list[tuple[str, str, str]]:
        rows = self._all(_RETRY, list(ids), scope.task, scope.queue, scope.older_than_ms,
                         self.backend.backstop_ms)
        return [(str(i), str(outcome), str(extra)) for i, outcome, extra in rows]

    def retry(self, job_id: str) -> OpResult:
        [(_, outcome, extra)] = self._retry([job_id], Scope())
        if outcome == "conflict":
            lock = (self.backend.job(job_id) or {}).get("uk", "")
            raise RetryConflict(job_id, extra, lock)
        return op_result(job_id, "retry", outcome, extra)

    def discard(self, job_id: str) -> OpResult:
        outcome, extra = self._all("SELECT * FROM admin_discard(%s)", job_id)[0]
        return op_result(job_id, "discard", str(outcome), str(extra))

    def cancel(self, job_id: str) -> OpResult:
        outcome, extra = self._all("SELECT * FROM admin_cancel(%s)", job_id)[0]
        return op_result(job_id, "cancel", str(outcome), str(extra))

    def _in_scope(self, state: str, scope: Scope) -> list[str]:
        """Ids of ``state`` in ``scope``, oldest first (a read; re-checked when changed)."""
        where: list[str] = ["state = %s"]
        params: list[Any] = [state]
        if scope.task is not None:
            where.append("name = %s")
            params.append(scope.task)
        if scope.queue is not None:
            where.append("queue = %s")
            params.append(scope.queue)
        if scope.older_than_ms is not None:
            where.append("COALESCE(finished_ms, 0) <= now_ms() - %s::bigint")
            params.append(scope.older_than_ms)
        if scope.ids is not None:
            where.append("id = ANY (%s::text[])")
            params.append(list(scope.ids))
        sql = (f"SELECT id FROM jobs WHERE {' AND '.join(where)} "
               'ORDER BY finished_ms, id COLLATE "C"')
        return [row[0] for row in self._all(sql, *params)]

    def retry_many(self, scope: Scope, all: bool = False,
                   result: BulkResult | None = None) -> BulkResult:
        check_scope("retry", scope, all)
        ids = self._in_scope("failed", scope)
        result = bulk_result("retry", len(ids), result)
        for chunk in batches(ids):
            for job_id, outcome, extra in self._retry(chunk, scope):
                result.note_retry(job_id, outcome, extra)
        return result

    def purge(self, state: str, scope: Scope, all: bool = False,
              result: BulkResult | None = None) -> BulkResult:
        check_state(state, PURGEABLE)
        check_scope("purge", scope, all)
        ids = self._in_scope(state, scope)
        result = bulk_result("purge", len(ids), result)
        for chunk in batches(ids):
            result.changed += [str(row[0]) for row in self._all(
                _PURGE, state, list(chunk), scope.task, scope.queue,
                scope.older_than_ms)]
        return result

    def finished_since(self, since_ms: int) -> tuple[int, int]:
        # The states spelled literally, so that the partial index jobs_finished serves both.
        [(completed, failed)] = self._all(
            "SELECT (SELECT count(*) FROM jobs WHERE state = 'completed' AND finished_ms >= %s),"
            " (SELECT count(*) FROM jobs WHERE state = 'failed' AND finished_ms >= %s)",
            since_ms, since_ms)
        return int(completed), int(failed)

    def finished_histogram(self, since_ms: int, bucket_ms: int, buckets: int
                           ) -> list[tuple[int, int]]:
        until = since_ms + bucket_ms * buckets
        # The states spelled literally, so that the partial index jobs_finished serves both.
        sql = " UNION ALL ".join(
            f"SELECT '{state}', (finished_ms - %s) / %s, count(*) FROM jobs WHERE "
            f"state = '{state}' AND finished_ms >= %s AND finished_ms < %s GROUP BY 2"
            for state in ("completed", "failed"))
        return histogram(self._all(sql, *([since_ms, bucket_ms, since_ms, until] * 2)), buckets)

    def wait_samples(self, since_ms: int, limit: int) -> list[tuple[str, int]]:
        # Finished jobs started since then finished since then too: the finish-time index
        # narrows them down.
        parts = [f"(SELECT queue, started_ms - greatest(enqueued_ms, coalesce(due_ms, 0)), "
                 f"started_ms FROM jobs WHERE state = '{state}' AND started_ms >= %s{extra} "
                 "ORDER BY started_ms DESC LIMIT %s)"
                 for state, extra in (("running", ""),
                                      ("completed", " AND finished_ms >= %s"),
                                      ("failed", " AND finished_ms >= %s"))]
        rows = self._all(" UNION ALL ".join(parts) + " ORDER BY 3 DESC LIMIT %s",
                         since_ms, limit, since_ms, since_ms, limit, since_ms, since_ms, limit,
                         limit)
        return [(str(q), max(int(w), 0)) for q, w, _ in rows if w is not None]

    def worker_leases(self) -> list[WorkerLeases]:
        return [WorkerLeases(str(worker), int(n), int(deadline or 0), int(start or 0))
                for worker, n, deadline, start in self._all(
                    "SELECT worker, count(*), max(lease_expires_ms), min(started_ms) FROM jobs "
                    "WHERE state = 'running' AND worker IS NOT NULL GROUP BY worker")]

    # -- status -------------------------------------------------------------------------
    def status(self) -> Status:
        # Per state, spelled literally (see counts): the partial indexes find the rows.
        depth = " UNION ALL ".join(
            f"SELECT queue, state, count(*) FROM jobs WHERE state = '{state}' GROUP BY queue, "
            "state" for state in ("enqueued", "scheduled", "blocked", "running", "failed"))
        oldest = " UNION ALL ".join(
            f"SELECT queue, greatest(enqueued_ms, due_ms) AS since FROM jobs "
            f"WHERE state = '{state}'" for state in ("enqueued", "blocked"))
        return status_from_rows(
            self.now_ms(), self.counts(), self._all(depth),
            self._all(f"SELECT queue, min(since) FROM ({oldest}) w GROUP BY queue"),
            self._all(
                "SELECT conc_group, count(*), max(conc_limit) FROM jobs WHERE state = 'blocked' "
                "AND conc_group IS NOT NULL AND conc_group <> '' GROUP BY conc_group"),
            self._all(
                "SELECT s.conc_group, count(*), max(j.conc_limit) FROM slots s JOIN jobs j "
                "ON j.id = s.job_id AND j.state = 'running' GROUP BY s.conc_group"),
        )


def _factory(backend: Any, owns_backend: bool) -> PostgresAdmin:
    return PostgresAdmin(backend, owns_backend=owns_backend)


register_admin(PostgresBackend, _factory)
