"""The PostgreSQL store's inspector: queries of its tables (``stores/postgres/sql``); keys
are stored through the schema's ``store_key`` function, as the store's functions store them."""

from __future__ import annotations

from typing import Any

from tests.inspectors.base import Inspector
from tests.inspectors.sql import FIELDS, ORDER, record_of

#: The record's columns, the history read as text (not ``jsonb``).
COLUMNS = {**FIELDS, "hist": "history::text"}


class PostgresInspector(Inspector):
    """Read-outs of one ``PostgresBackend``'s schema."""

    def _all(self, sql: str, *params: Any) -> list[Any]:
        return self.backend._rows(sql, list(params))  # type: ignore[no-any-return]

    def _value(self, sql: str, *params: Any) -> Any:
        return self.backend._value(sql, list(params))

    def job(self, job_id: str) -> dict[str, str] | None:
        row = self.backend._one(f"SELECT {', '.join(COLUMNS.values())} FROM jobs WHERE id = %s",
                                [job_id])
        return None if row is None else record_of(COLUMNS, row)

    def holder(self, lock: str) -> str | None:
        return self._value(  # type: ignore[no-any-return]
            "SELECT live_holder(store_key(%s), now_ms())", lock)

    def holds(self) -> dict[str, str]:
        return {str(lock): str(holder) for lock, holder in self._all(
            "SELECT lock, holder FROM holds WHERE expires_ms >= now_ms()")}

    def hold_deadline(self, lock: str) -> int | None:
        value = self._value("SELECT expires_ms FROM holds WHERE lock = store_key(%s) "
                            "AND expires_ms >= now_ms()", lock)
        return None if value is None else int(value)

    def slot_holders(self, group: str) -> set[str]:
        return {row[0] for row in self._all(
            "SELECT job_id FROM slots WHERE conc_group = store_key(%s)", group)}

    def ids_in_state(self, state: str, limit: int = 1000) -> list[str]:
        if state not in ORDER:
            return []
        # The state is a literal (one of ORDER's) so the planner uses its partial index.
        return [row[0] for row in self._all(
            f"SELECT id FROM jobs WHERE state = '{state}' ORDER BY {ORDER[state]}, id "
            "LIMIT %s", limit)]

    def lease_deadline(self, job_id: str) -> int | None:
        value = self._value("SELECT lease_expires_ms FROM jobs WHERE id = %s "
                            "AND state = 'running'", job_id)
        return None if value is None else int(value)

    def transient_deadline(self, queue: str) -> int | None:
        value = self._value("SELECT max(expires_ms) FROM transient WHERE queue = %s "
                            "AND expires_ms >= now_ms()", queue)
        return None if value is None else int(value)

    def blocked_groups(self) -> set[str]:
        """Concurrency groups having jobs blocked on their slots (not rate-parked ones)."""
        return {row[0] for row in self._all(
            "SELECT DISTINCT conc_group FROM jobs WHERE state = 'blocked' AND NOT rate_parked "
            "AND conc_group <> ''")}

    def force_state(self, job_id: str, state: str) -> None:
        self._all("UPDATE jobs SET state = %s WHERE id = %s RETURNING 1", state, job_id)
