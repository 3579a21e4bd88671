"""The admin on the SQLite store: each change is one ``BEGIN IMMEDIATE`` transaction.

It runs on the :class:`~celery_plus.stores.sqlite.backend.SQLiteBackend`'s own connection
handling (``_write``: one immediate transaction retried while the database is busy, waiters
woken after the commit; ``_read``) and its transaction helpers (``_Tx``: the SQL twins of
``lua/lib.lua``'s ``release_hold``, ``set_hold``, ``push_history``, ``enqueue`` ...), so the
rules are the Redis admin scripts' (``stores/redis/lua/admin/*.lua``) in SQL: the state of
each job is re-checked inside the transaction that changes it. The orchestration and what
both SQL stores read alike are :class:`~celery_plus.stores.sql_admin.SqlAdmin`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from celery_plus.model.admin import WAITING, Scope, time_field
from celery_plus.stores.admin_base.orchestration import Outcome
from celery_plus.stores.sql_admin import Listing, SqlAdmin, summary_columns
from celery_plus.stores.sql_error_groups import SqlErrorGroups
from celery_plus.stores.sqlite.backend import PRIORITY_FACTOR, SQLiteBackend, _Tx

#: A change to one job inside a transaction: (outcome, extra).
Change = Callable[[_Tx, str], tuple[str, str]]


class SQLiteAdmin(SqlErrorGroups, SqlAdmin[SQLiteBackend]):
    """:class:`~celery_plus.model.admin.AdminStore` on a :class:`SQLiteBackend`'s database."""

    MARK = "?"
    ID = "id"
    KEYSET = "(?, ?)"
    GREATEST = "MAX"
    SUMMARY = summary_columns("j.", "length(CAST({} AS BLOB))")
    # (schema.sql's jobs_error_groups spells it the same)
    GROUP_TYPE = "substr(COALESCE(exc_type, ''), 1, 200)"
    GROUP_MESSAGE = ("substr(substr(COALESCE(exc_message, ''), 1, "
                     "instr(COALESCE(exc_message, '') || char(10), char(10)) - 1), 1, 200)")

    def _all(self, sql: str, *params: Any) -> list[Any]:
        return self.backend._read(lambda conn: conn.execute(sql, params).fetchall())

    # -- listings -----------------------------------------------------------------------
    def _page_sql(self, state: str, listing: Listing) -> str:
        # Deferred join: sort only (time, id) of the matches, then read the page's rows
        # (long texts cut in SQL) — sorting the wide rows made a page of 100k dead letters
        # take seconds. The time column itself (not COALESCE'd: the same order, as the
        # listed states always have it) so that jobs_by_finish_id yields finished states in
        # order.
        order = f"{time_field(state)} {listing.direction}, id {listing.direction}"
        page_ids = (f"SELECT id FROM jobs WHERE {listing.condition} ORDER BY {order} "
                    "LIMIT ? OFFSET ?")
        return (f"SELECT {self.SUMMARY[1]} FROM jobs j WHERE j.id IN ({page_ids}) "
                f"ORDER BY j.{order.replace(', ', ', j.')}")

    def _among(self, ids: Sequence[str]) -> tuple[str, list[Any]]:
        return f"id IN ({', '.join('?' * len(ids))})", list(ids)

    def history_put(self, bucket_ms: int, at_ms: int, sample: str, keep_from_ms: int
                    ) -> bool:
        def body(tx: _Tx) -> bool:
            tx.run("DELETE FROM queue_history WHERE bucket_ms < ?", keep_from_ms)
            return tx.run("INSERT INTO queue_history (bucket_ms, at_ms, sample) VALUES "
                          "(?, ?, ?) ON CONFLICT (bucket_ms) DO NOTHING",
                          bucket_ms, at_ms, sample) == 1

        return self.backend._write(body)

    def holder(self, lock: str) -> str | None:
        rows = self._all("SELECT holder FROM holds WHERE lock = ? AND expires_ms >= ?", lock,
                         self.now_ms())
        return str(rows[0][0]) if rows else None

    # -- changes (one transaction each; the job's state re-checked inside) ---------------
    def _each(self, ids: Sequence[str], change: Change) -> list[Outcome]:
        """``change`` on each of ``ids`` in one transaction."""
        return self.backend._write(
            lambda tx: [(job_id, *change(tx, job_id)) for job_id in ids])

    @staticmethod
    def _entry(tx: _Tx, job_id: str, outcome: str) -> None:
        deliveries = tx.scalar("SELECT deliveries FROM jobs WHERE id = ?", job_id)
        tx.push_history(job_id, {"delivery": int(deliveries or 0), "worker": "",
                                 "started_ms": tx.now, "finished_ms": tx.now,
                                 "outcome": outcome})

    def retry_batch(self, ids: Sequence[str], scope: Scope) -> list[Outcome]:
        def retry(tx: _Tx, job_id: str) -> tuple[str, str]:
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
                holder = tx.take_hold(lock, job_id, window, ttl, tx.backstop)
                if holder is not None:
                    return "conflict", holder
            self._entry(tx, job_id, "admin retry")
            new_score = (int(score) // PRIORITY_FACTOR) * PRIORITY_FACTOR + tx.incr("seq")
            tx.run("UPDATE jobs SET deliveries = 0, enqueued_ms = ?, score = ?, "
                   "finished_ms = NULL WHERE id = ?", tx.now, new_score, job_id)
            tx.enqueue(job_id)
            return "enqueued", "failed"

        return self._each(ids, retry)

    def discard_one(self, job_id: str) -> Outcome:
        [outcome] = self.discard_batch([job_id])
        return outcome

    def discard_batch(self, ids: Sequence[str]) -> list[Outcome]:
        def discard(tx: _Tx, job_id: str) -> tuple[str, str]:
            state = tx.scalar("SELECT state FROM jobs WHERE id = ?", job_id)
            if state is None:
                return "missing", ""
            if state != "failed":
                return "noop", state
            self._entry(tx, job_id, "admin discard")
            tx.run("UPDATE jobs SET state = 'discarded', finished_ms = ? WHERE id = ?",
                   tx.now, job_id)
            return "discarded", "failed"

        return self._each(ids, discard)

    def cancel_one(self, job_id: str) -> Outcome:
        [outcome] = self.cancel_batch([job_id])
        return outcome

    def cancel_batch(self, ids: Sequence[str]) -> list[Outcome]:
        def cancel(tx: _Tx, job_id: str) -> tuple[str, str]:
            row = tx.one("SELECT state, unique_lock, unique_window FROM jobs WHERE id = ?",
                         job_id)
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

        return self._each(ids, cancel)

    def purge_batch(self, state: str, ids: Sequence[str], scope: Scope) -> list[str]:
        def delete(tx: _Tx, job_id: str) -> tuple[str, str]:
            row = tx.one("SELECT state, name, queue, finished_ms FROM jobs WHERE id = ?",
                         job_id)
            if row is None or row[0] != state or not scope.matches(tx.now, *row[1:]):
                return "noop", ""
            tx.run("DELETE FROM jobs WHERE id = ?", job_id)
            return "deleted", state

        return [job_id for job_id, outcome, _ in self._each(ids, delete) if outcome == "deleted"]
