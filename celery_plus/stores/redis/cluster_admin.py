"""The admin on a Redis Cluster store: a :class:`~.admin.RedisAdmin` per queue scope, fanned
out over the store's queue registry and merged (docs/redis-cluster.md).

Listings merge the queues' listings in the listing's order (time then id); a listing filtered
by queue reads that queue only. Changes by id go to the job's queue; bulk changes run per
queue. Each queue's part is the single-server admin's, on the queue's slot.
"""

from __future__ import annotations

import heapq
import itertools
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence

from celery_plus.model.admin import Query, Scope, Walked, time_of
from celery_plus.model.capped import CAPPED, is_capped
from celery_plus.stores.admin_base.aggregates import StatusRows
from celery_plus.stores.admin_base.listing import Record
from celery_plus.stores.admin_base.orchestration import Outcome, StoreAdmin
from celery_plus.stores.redis.admin import RedisAdmin
from celery_plus.stores.redis.cluster import RedisClusterBackend


class RedisClusterAdmin(StoreAdmin[RedisClusterBackend]):
    """:class:`~celery_plus.model.admin.AdminStore` on a Redis Cluster store."""

    def __init__(self, backend: RedisClusterBackend, owns_backend: bool = False) -> None:
        super().__init__(backend, owns_backend)
        self._admins: dict[str, RedisAdmin] = {}

    def _admin(self, queue: str) -> RedisAdmin:
        admin = self._admins.get(queue)
        if admin is None:
            admin = self._admins[queue] = RedisAdmin(self.backend.queue(queue))
        return admin

    def _admins_for(self, queue: str | None) -> list[RedisAdmin]:
        """The admin of ``queue``'s scope, or of every registered queue."""
        return [self._admin(q) for q in ([queue] if queue else self.backend.queues())]

    def _by_queue(self, ids: Iterable[str]) -> dict[str, list[str]]:
        grouped: dict[str, list[str]] = defaultdict(list)
        for job_id in ids:
            queue = self.backend.queue_of(job_id)
            if queue is not None:
                grouped[queue].append(job_id)
        return grouped

    @staticmethod
    def _merged(parts: Iterable[Iterable[Record]], state: str, query: Query) -> Iterator[Record]:
        """The queues' rows, each in the listing's order, as one listing."""
        def order(row: Record) -> tuple[int, str]:
            return time_of(state, row), row.id

        return heapq.merge(*parts, key=order, reverse=not query.oldest_first)

    # -- listings -----------------------------------------------------------------------
    def page(self, state: str, query: Query, offset: int, limit: int
             ) -> tuple[list[Record], int]:
        rows, total, _ = self.page_walked(state, query, offset, limit)
        return rows, total

    def page_walked(self, state: str, query: Query, offset: int, limit: int
                    ) -> tuple[list[Record], int, Walked | None]:
        parts = [a.page_walked(state, query, 0, offset + limit)
                 for a in self._admins_for(query.queue)]
        rows = self._merged((p[0] for p in parts), state, query)
        total = sum(p[1] for p in parts)
        if any(is_capped(p[1]) for p in parts):  # a task's count in a large state: capped
            total = CAPPED
        # The queues whose walk the limit cut short (each queue walks up to the limit).
        cut = [p[2] for p in parts if p[2] is not None]
        walked = (Walked(sum(w.examined for w in cut), sum(w.of for w in cut),
                         any(w.building for w in cut)) if cut else None)
        return list(itertools.islice(rows, offset, offset + limit)), total, walked

    def candidates(self, state: str, query: Query) -> Iterable[Record]:
        rows = self._merged((a.candidates(state, query) for a in self._admins_for(query.queue)),
                            state, query)
        return rows if query.text_limit is None else itertools.islice(rows, query.text_limit + 1)

    def holder(self, lock: str) -> str | None:
        return next((h for a in self._admins_for(None) if (h := a.holder(lock)) is not None),
                    None)

    # -- changes --------------------------------------------------------------------------
    def select(self, state: str, scope: Scope) -> list[str]:
        if scope.ids is not None:
            return [i for q, ids in self._by_queue(scope.ids).items()
                    for i in self._admin(q).select(state, Scope(scope.task, scope.queue,
                                                                scope.older_than_ms, tuple(ids)))]
        return [i for a in self._admins_for(scope.queue) for i in a.select(state, scope)]

    def retry_batch(self, ids: Sequence[str], scope: Scope) -> list[Outcome]:
        grouped = self._by_queue(ids)
        found = {i for part in grouped.values() for i in part}
        done = [o for q, part in grouped.items() for o in self._admin(q).retry_batch(part, scope)]
        return done + [(i, "missing", "") for i in ids if i not in found]

    def _one(self, job_id: str, action: str) -> Outcome:
        queue = self.backend.queue_of(job_id)
        if queue is None:
            return (job_id, "missing", "")
        admin = self._admin(queue)
        return admin.discard_one(job_id) if action == "discard" else admin.cancel_one(job_id)

    def discard_one(self, job_id: str) -> Outcome:
        return self._one(job_id, "discard")

    def discard_batch(self, ids: Sequence[str]) -> list[Outcome]:
        return self._per_queue(ids, RedisAdmin.discard_batch)

    def cancel_batch(self, ids: Sequence[str]) -> list[Outcome]:
        return self._per_queue(ids, RedisAdmin.cancel_batch)

    def _per_queue(self, ids: Sequence[str],
                   step: Callable[[RedisAdmin, Sequence[str]], list[Outcome]]) -> list[Outcome]:
        """``step`` on each queue's share of ``ids`` (one script call in its slot)."""
        grouped = self._by_queue(ids)
        found = {i for part in grouped.values() for i in part}
        done = [o for q, part in grouped.items() for o in step(self._admin(q), part)]
        return done + [(i, "missing", "") for i in ids if i not in found]

    def cancel_one(self, job_id: str) -> Outcome:
        return self._one(job_id, "cancel")

    def purge_batch(self, state: str, ids: Sequence[str], scope: Scope) -> list[str]:
        return [i for q, part in self._by_queue(ids).items()
                for i in self._admin(q).purge_batch(state, part, scope)]

    # -- rows for the summaries (every queue's) -------------------------------------------
    def count_rows(self) -> list[tuple[str, int]]:
        total: dict[str, int] = defaultdict(int)
        for admin in self._admins_for(None):
            for state, n in admin.count_rows():
                total[state] += n
        return list(total.items())

    def status_rows(self) -> StatusRows:
        parts = [a.status_rows() for a in self._admins_for(None)]
        return StatusRows(depth=[r for p in parts for r in p.depth],
                          oldest=[r for p in parts for r in p.oldest],
                          blocked=[r for p in parts for r in p.blocked],
                          running=[r for p in parts for r in p.running],
                          unindexed=sum(p.unindexed for p in parts))

    def finished_since(self, since_ms: int) -> tuple[int, int]:
        pairs = [a.finished_since(since_ms) for a in self._admins_for(None)]
        return sum(p[0] for p in pairs), sum(p[1] for p in pairs)

    def finished_rows(self, since_ms: int, bucket_ms: int, buckets: int
                      ) -> list[tuple[str, int, int]]:
        total: dict[tuple[str, int], int] = defaultdict(int)
        for admin in self._admins_for(None):
            for state, n, count in admin.finished_rows(since_ms, bucket_ms, buckets):
                total[(state, n)] += count
        return [(state, n, count) for (state, n), count in total.items()]

    def wait_rows(self, since_ms: int, limit: int) -> list[tuple[int, str, int | None]]:
        return [r for a in self._admins_for(None) for r in a.wait_rows(since_ms, limit)]

    def lease_rows(self) -> list[tuple[str, int, int | None, int | None]]:
        return [r for a in self._admins_for(None) for r in a.lease_rows()]
