"""The admin on the SQLite store: each change is one ``BEGIN IMMEDIATE`` transaction.

It runs on the :class:`~celery_plus.stores.sqlite.backend.SQLiteBackend`'s own connection
handling (``_write``: one immediate transaction retried while the database is busy, waiters
woken after the commit; ``_read``) and its transaction helpers (``_Tx``: the SQL twins of
``lua/lib.lua``'s ``release_hold``, ``set_hold``, ``push_history``, ``enqueue`` ...), so the
rules are the Redis admin scripts' (``stores/redis/lua/admin/*.lua``) in SQL: the state of
each job is re-checked inside the transaction that changes it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import partial
from typing import Any

from ...admin.store import (
    PURGEABLE,
    SEARCH_CHUNK,
    WAITING,
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
from .backend import FIELDS, PRIORITY_FACTOR, SQLiteBackend, _Tx

_SUMMARY_NAMES, _SUMMARY_COLUMNS = summary_columns("", "length(CAST({} AS BLOB))")

Outcome = tuple[str, str]


def _record(fields: Sequence[str], row: Sequence[Any]) -> dict[str, Any]:
    """A row as a record with the Redis hash's field names (NULL columns left out)."""
    return {f: v for f, v in zip(fields, row, strict=True) if v is not None}


class SQLiteAdmin:
    """:class:`~celery_plus.admin.store.AdminStore` on a :class:`SQLiteBackend`'s database."""

    def __init__(self, backend: SQLiteBackend, *, owns_backend: bool = False) -> None:
        self.backend = backend
        self._owns = owns_backend

    def now_ms(self) -> int:
        return self.backend.now_ms()

    def close(self) -> None:
        if self._owns:
            self.backend.close()

    def _all(self, sql: str, *params: Any) -> list[Any]:
        return self.backend._read(lambda conn: conn.execute(sql, params).fetchall())

    # -- reads --------------------------------------------------------------------------
    def counts(self) -> Counts:
        rows = self._all("SELECT state, COUNT(*) FROM jobs GROUP BY state")
        known = set(Counts.__dataclass_fields__)
        return Counts(**{state: int(n) for state, n in rows if state in known})

    def jobs(self, state: str, query: Query, offset: int, limit: int
             ) -> tuple[list[JobSummary], int]:
        check_state(state)
        time_column = FIELDS[time_field(state)]
        column = f"COALESCE({time_column}, 0)"
        where: list[str] = ["state = ?"]
        params: list[Any] = [state]
        for value, clause in ((query.task, "name = ?"), (query.queue, "queue = ?"),
                              (query.since_ms, f"{column} >= ?"),
                              (query.until_ms, f"{column} <= ?")):
            if value is not None:
                where.append(clause)
                params.append(value)
        condition = " AND ".join(where)
        direction = "ASC" if query.oldest_first else "DESC"
        if query.text:
            return text_page(self._search(condition, params, time_column, direction,
                                          query.text_limit), query, offset, limit)
        total = self._all(f"SELECT COUNT(*) FROM jobs WHERE {condition}", *params)[0][0]
        # Deferred join: sort only (time, id) of the matches, then read the page's rows
        # (long texts cut in SQL) — sorting the wide rows made a page of 100k dead letters
        # take seconds. The time column itself (not COALESCE'd: the same order, as the
        # listed states always have it) so that jobs_by_finish_id yields finished states in
        # order.
        order = f"{time_column} {direction}, id {direction}"
        page_ids = f"SELECT id FROM jobs WHERE {condition} ORDER BY {order} LIMIT ? OFFSET ?"
        rows = self._all(f"SELECT {_SUMMARY_COLUMNS} FROM jobs WHERE id IN ({page_ids}) "
                         f"ORDER BY {order}", *params, limit, offset)
        return [summary_from_record(row[0], _record(_SUMMARY_NAMES, row[1:]))
                for row in rows], int(total)

    def _search(self, condition: str, params: list[Any], time_column: str, direction: str,
                text_limit: int | None) -> Iterator[tuple[str, dict[str, Any]]]:
        """Whole records of a text search (:func:`~.sql_rows.keyset_search`)."""
        at = f"COALESCE({time_column}, 0)"
        columns = ", ".join(["id", at, *(FIELDS[f] for f in SEARCH_FIELDS)])
        after = "<" if direction == "DESC" else ">"

        def fetch(last: tuple[Any, Any] | None) -> list[Any]:
            keyset = "" if last is None else f" AND ({at}, id) {after} (?, ?)"
            return self._all(f"SELECT {columns} FROM jobs WHERE {condition}{keyset} ORDER BY "
                             f"{at} {direction}, id {direction} LIMIT {SEARCH_CHUNK}",
                             *params, *(last or ()))

        return keyset_search(fetch, text_limit, _record)

    def show(self, job_id: str) -> JobDetail | None:
        rec = self.backend.job(job_id)
        if rec is None:
            return None
        lock = rec.get("uk") or ""
        holder = self.backend.holder(lock) if lock else None
        return detail_from_record(job_id, rec, holder)

    # -- changes (one transaction each; the job's state re-checked inside) ---------------
    @staticmethod
    def _entry(tx: _Tx, job_id: str, outcome: str) -> None:
        deliveries = tx.scalar("SELECT deliveries FROM jobs WHERE id = ?", job_id)
        tx.push_history(job_id, {"delivery": int(deliveries or 0), "worker": "",
                                 "started_ms": tx.now, "finished_ms": tx.now,
                                 "outcome": outcome})

    def _retry(self, tx: _Tx, job_id: str, scope: Scope) -> Outcome:
        """stores/redis/lua/admin/retry.lua in SQL."""
        row = tx.one("SELECT state, name, queue, finished_ms, unique_lock, unique_window, "
                     "unique_ttl_ms, score FROM jobs WHERE id = ?", job_id)
        if row is None:
            return "missing", ""
        state, name, queue, finished, lock, window, ttl, score = row
        if state != "failed":
            return "noop", state
        if not scope.matches(tx.now, name, queue, finished):
            return "skipped", state
        if lock:
            holder = tx.live_holder(lock)
            if holder is not None and holder != job_id:
                return "conflict", holder
            if window == "ttl":
                if holder is None and (ttl or 0) > 0:
                    tx.set_hold(lock, job_id, int(ttl))
            else:
                tx.set_hold(lock, job_id, tx.backstop)
        self._entry(tx, job_id, "admin retry")
        new_score = (int(score) // PRIORITY_FACTOR) * PRIORITY_FACTOR + tx.incr("seq")
        tx.run("UPDATE jobs SET deliveries = 0, enqueued_ms = ?, score = ?, finished_ms = NULL "
               "WHERE id = ?", tx.now, new_score, job_id)
        tx.enqueue(job_id)
        return "enqueued", "failed"

    def _retry_chunk(self, tx: _Tx, chunk: Sequence[str], scope: Scope
                     ) -> list[tuple[str, str, str]]:
        return [(job_id, *self._retry(tx, job_id, scope)) for job_id in chunk]

    def _discard(self, tx: _Tx, job_id: str) -> Outcome:
        state = tx.scalar("SELECT state FROM jobs WHERE id = ?", job_id)
        if state is None:
            return "missing", ""
        if state != "failed":
            return "noop", state
        self._entry(tx, job_id, "admin discard")
        tx.run("UPDATE jobs SET state = 'discarded', finished_ms = ? WHERE id = ?",
               tx.now, job_id)
        return "discarded", "failed"

    def _cancel(self, tx: _Tx, job_id: str) -> Outcome:
        row = tx.one("SELECT state, unique_lock, unique_window FROM jobs WHERE id = ?", job_id)
        if row is None:
            return "missing", ""
        state, lock, window = row
        if state not in WAITING:
            return "noop", state
        tx.release_hold(lock, window, job_id)
        self._entry(tx, job_id, "admin cancel")
        tx.run("UPDATE jobs SET state = 'canceled', finished_ms = ? WHERE id = ?",
               tx.now, job_id)
        return "canceled", state

    def retry(self, job_id: str) -> OpResult:
        outcome, extra = self.backend._write(lambda tx: self._retry(tx, job_id, Scope()))
        if outcome == "conflict":
            lock = (self.backend.job(job_id) or {}).get("uk", "")
            raise RetryConflict(job_id, extra, lock)
        return op_result(job_id, "retry", outcome, extra)

    def discard(self, job_id: str) -> OpResult:
        return op_result(job_id, "discard", *self.backend._write(
            lambda tx: self._discard(tx, job_id)))

    def cancel(self, job_id: str) -> OpResult:
        return op_result(job_id, "cancel", *self.backend._write(
            lambda tx: self._cancel(tx, job_id)))

    def _in_scope(self, state: str, scope: Scope) -> list[str]:
        """Ids of ``state`` in ``scope``, oldest first (a read; re-checked when changed)."""
        where: list[str] = ["state = ?"]
        params: list[Any] = [state]
        if scope.task is not None:
            where.append("name = ?")
            params.append(scope.task)
        if scope.queue is not None:
            where.append("queue = ?")
            params.append(scope.queue)
        if scope.older_than_ms is not None:
            where.append("COALESCE(finished_ms, 0) <= ?")
            params.append(self.now_ms() - scope.older_than_ms)
        if scope.ids is not None:
            where.append(f"id IN ({', '.join('?' * len(scope.ids))})")
            params.extend(scope.ids)
        sql = (f"SELECT id FROM jobs WHERE {' AND '.join(where)} "
               "ORDER BY finished_ms, id")
        return [row[0] for row in self._all(sql, *params)]

    def retry_many(self, scope: Scope, all: bool = False,
                   result: BulkResult | None = None) -> BulkResult:
        check_scope("retry", scope, all)
        ids = self._in_scope("failed", scope)
        result = bulk_result("retry", len(ids), result)
        for chunk in batches(ids):
            outcomes = self.backend._write(partial(self._retry_chunk, chunk=chunk, scope=scope))
            for job_id, outcome, extra in outcomes:
                result.note_retry(job_id, outcome, extra)
        return result

    def purge(self, state: str, scope: Scope, all: bool = False,
              result: BulkResult | None = None) -> BulkResult:
        check_state(state, PURGEABLE)
        check_scope("purge", scope, all)
        ids = self._in_scope(state, scope)
        result = bulk_result("purge", len(ids), result)

        def delete(tx: _Tx, chunk: Sequence[str]) -> list[str]:
            deleted = []
            for job_id in chunk:
                row = tx.one("SELECT state, name, queue, finished_ms FROM jobs WHERE id = ?",
                             job_id)
                if row is not None and row[0] == state and scope.matches(tx.now, *row[1:]):
                    tx.run("DELETE FROM jobs WHERE id = ?", job_id)
                    deleted.append(job_id)
            return deleted

        for chunk in batches(ids):
            result.changed += self.backend._write(partial(delete, chunk=chunk))
        return result

    def finished_since(self, since_ms: int) -> tuple[int, int]:
        # Two range counts on the (state, finished_ms, id) index.
        sql = "SELECT COUNT(*) FROM jobs WHERE state = ? AND finished_ms >= ?"
        return (int(self._all(sql, "completed", since_ms)[0][0]),
                int(self._all(sql, "failed", since_ms)[0][0]))

    def finished_histogram(self, since_ms: int, bucket_ms: int, buckets: int
                           ) -> list[tuple[int, int]]:
        sql = ("SELECT state, (finished_ms - ?) / ?, COUNT(*) FROM jobs WHERE state = ? AND "
               "finished_ms >= ? AND finished_ms < ? GROUP BY 2")
        until = since_ms + bucket_ms * buckets
        rows = [row for state in ("completed", "failed")
                for row in self._all(sql, since_ms, bucket_ms, state, since_ms, until)]
        return histogram(rows, buckets)

    def wait_samples(self, since_ms: int, limit: int) -> list[tuple[str, int]]:
        # Finished jobs started since then finished since then too: the finish-time index
        # narrows them down.
        rows = []
        for state, extra in (("running", ""), ("completed", " AND finished_ms >= ?"),
                             ("failed", " AND finished_ms >= ?")):
            rows += self._all(
                "SELECT queue, started_ms - MAX(enqueued_ms, COALESCE(due_ms, 0)), started_ms "
                f"FROM jobs WHERE state = ? AND started_ms >= ?{extra} "
                "ORDER BY started_ms DESC LIMIT ?",
                state, since_ms, *([since_ms] if extra else []), limit)
        rows.sort(key=lambda row: row[2], reverse=True)
        return [(str(q), max(int(w), 0)) for q, w, _ in rows[:limit] if w is not None]

    def worker_leases(self) -> list[WorkerLeases]:
        return [WorkerLeases(str(worker), int(n), int(deadline or 0), int(start or 0))
                for worker, n, deadline, start in self._all(
                    "SELECT worker, COUNT(*), MAX(lease_expires_ms), MIN(started_ms) FROM jobs "
                    "WHERE state = 'running' AND worker IS NOT NULL GROUP BY worker")]

    # -- status -------------------------------------------------------------------------
    def status(self) -> Status:
        return status_from_rows(
            self.now_ms(), self.counts(),
            self._all(
                "SELECT queue, state, COUNT(*) FROM jobs WHERE state IN ('enqueued', "
                "'scheduled', 'blocked', 'running', 'failed') GROUP BY queue, state"),
            self._all(
                "SELECT queue, MIN(MAX(enqueued_ms, due_ms)) FROM jobs "
                "WHERE state IN ('enqueued', 'blocked') GROUP BY queue"),
            self._all(
                "SELECT conc_group, COUNT(*), MAX(conc_limit) FROM jobs WHERE state = 'blocked' "
                "AND conc_group IS NOT NULL AND conc_group != '' GROUP BY conc_group"),
            self._all(
                "SELECT s.conc_group, COUNT(*), MAX(j.conc_limit) FROM slots s JOIN jobs j "
                "ON j.id = s.job_id AND j.state = 'running' GROUP BY s.conc_group"),
        )
