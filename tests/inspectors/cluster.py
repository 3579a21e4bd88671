"""The Redis Cluster store's inspector: the Redis inspector of each queue's scope (the job's
queue for a job; every registered queue for the store-wide read-outs)."""

from __future__ import annotations

from typing import Any

from tests.inspectors.base import Inspector
from tests.inspectors.redis import RedisInspector


class ClusterInspector(Inspector):
    """Read-outs of a ``RedisClusterBackend``: per scope, as ``stores/redis/cluster.py``
    spreads the keys."""

    def _job(self, job_id: str) -> RedisInspector | None:
        scope = self.backend._job_scope(job_id)
        return None if scope is None else RedisInspector(scope)

    def _all(self) -> list[RedisInspector]:
        return [RedisInspector(scope) for scope in self.backend._all()]

    def job(self, job_id: str) -> dict[str, str] | None:
        scope = self._job(job_id)
        return None if scope is None else scope.job(job_id)

    def lease_deadline(self, job_id: str) -> int | None:
        scope = self._job(job_id)
        return None if scope is None else scope.lease_deadline(job_id)

    def force_state(self, job_id: str, state: str) -> None:
        scope = self._job(job_id)
        if scope is not None:
            scope.force_state(job_id, state)

    def holder(self, lock: str) -> str | None:
        return next((h for s in self._all() if (h := s.holder(lock)) is not None), None)

    def hold_deadline(self, lock: str) -> int | None:
        return next((d for s in self._all() if (d := s.hold_deadline(lock)) is not None), None)

    def holds(self) -> dict[str, str]:
        out: dict[str, str] = {}
        for scope in self._all():
            out.update(scope.holds())
        return out

    def slot_holders(self, group: str) -> set[str]:
        return set().union(*(s.slot_holders(group) for s in self._all()))

    def blocked_groups(self) -> set[str]:
        return set().union(*(s.blocked_groups() for s in self._all()))

    def ids_in_state(self, state: str, limit: int = 1000) -> list[str]:
        found: list[str] = []
        for scope in self._all():
            found += scope.ids_in_state(state, limit - len(found))
            if len(found) >= limit:
                break
        return found

    def transient_deadline(self, queue: str) -> int | None:
        store: Any = self.backend.store  # the global scope keeps the transient queues
        return RedisInspector(store).transient_deadline(queue)
