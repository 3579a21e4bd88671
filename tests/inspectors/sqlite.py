"""The SQLite store's inspector: queries of its tables (``stores/sqlite/schema.sql``)."""

from __future__ import annotations

from typing import Any

from tests.inspectors.base import Inspector
from tests.inspectors.sql import FIELDS, record_of

#: ``ids_in_state``'s order (SQLite's listed the discarded jobs by id).
ORDER = {"completed": "finished_ms", "failed": "finished_ms", "canceled": "finished_ms",
         "running": "lease_expires_ms", "scheduled": "due_ms", "enqueued": "score",
         "blocked": "score"}


class SQLiteInspector(Inspector):
    """Read-outs of one ``SQLiteBackend``'s database file."""

    def _all(self, sql: str, *params: Any) -> list[Any]:
        return self.backend._read(  # type: ignore[no-any-return]
            lambda conn: conn.execute(sql, params).fetchall())

    def _first(self, sql: str, *params: Any) -> Any:
        rows = self._all(sql, *params)
        return rows[0] if rows else None

    def job(self, job_id: str) -> dict[str, str] | None:
        row = self._first(f"SELECT {', '.join(FIELDS.values())} FROM jobs WHERE id = ?", job_id)
        return None if row is None else record_of(FIELDS, row)

    def holder(self, lock: str) -> str | None:
        row = self._first("SELECT holder FROM holds WHERE lock = ? AND expires_ms >= ?",
                          lock, self.backend.now_ms())
        return None if row is None else str(row[0])

    def holds(self) -> dict[str, str]:
        return {str(lock): str(holder) for lock, holder in self._all(
            "SELECT lock, holder FROM holds WHERE expires_ms >= ?", self.backend.now_ms())}

    def hold_deadline(self, lock: str) -> int | None:
        row = self._first("SELECT expires_ms FROM holds WHERE lock = ? AND expires_ms >= ?",
                          lock, self.backend.now_ms())
        return None if row is None else int(row[0])

    def slot_holders(self, group: str) -> set[str]:
        return {row[0] for row in self._all("SELECT job_id FROM slots WHERE conc_group = ?",
                                            group)}

    def ids_in_state(self, state: str, limit: int = 1000) -> list[str]:
        return [row[0] for row in self._all(
            f"SELECT id FROM jobs WHERE state = ? ORDER BY {ORDER.get(state, 'id')}, id "
            "LIMIT ?", state, limit)]

    def lease_deadline(self, job_id: str) -> int | None:
        row = self._first("SELECT lease_expires_ms FROM jobs WHERE id = ? AND state = 'running'",
                          job_id)
        return None if row is None or row[0] is None else int(row[0])

    def transient_deadline(self, queue: str) -> int | None:
        row = self._first("SELECT MAX(expires_ms) FROM transient WHERE queue = ? "
                          "AND expires_ms >= ?", queue, self.backend.now_ms())
        return None if row is None or row[0] is None else int(row[0])

    def blocked_groups(self) -> set[str]:
        """Concurrency groups having jobs blocked on their slots (not rate-parked ones)."""
        return {row[0] for row in self._all(
            "SELECT DISTINCT conc_group FROM jobs WHERE state = 'blocked' AND rate_parked = 0 "
            "AND conc_group <> ''")}

    def force_state(self, job_id: str, state: str) -> None:
        self.backend._write(lambda tx: tx.run("UPDATE jobs SET state = ? WHERE id = ?",
                                              state, job_id))
