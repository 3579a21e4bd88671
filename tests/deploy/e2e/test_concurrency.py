"""Acceptance line 3: per-key concurrency slots.

``proj.per_customer`` has ``concurrency=2, concurrency_key="customer_id"``. 3 customers x 10
jobs on ONE worker with 8 thread slots: at most (and, with this much work, exactly) 2 jobs of a
customer run at once, while the customers run in parallel; every job completes exactly once and
no slot, blocked job or blocked group is left behind. Runs on each durable store
(``broker_kind``: Redis, SQLite and PostgreSQL).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import redis

from celery_plus.model.store import Backend
from tests.inspectors import inspector_for

from .conftest import Worker, wait_until
from .proj import events

CUSTOMERS = ("acme", "globex", "initech")
JOBS_PER_CUSTOMER = 10
SECONDS = 0.5
LIMIT = 2


def _max_overlap(starts: list[float], ends: list[float]) -> int:
    """Largest number of [start, end] intervals open at one instant (ends before starts on ties)."""
    points = sorted([(t, 1) for t in starts] + [(t, -1) for t in ends],
                    key=lambda p: (p[0], p[1]))
    running = peak = 0
    for _, delta in points:
        running += delta
        peak = max(peak, running)
    return peak


def test_per_customer_slots_limit_each_customer_and_run_customers_in_parallel(
    client: Any, start_worker: Callable[..., Worker], prefix: str, store: redis.Redis, view: Backend
) -> None:
    inspect = inspector_for(view)
    task = client.tasks["proj.per_customer"]
    total = len(CUSTOMERS) * JOBS_PER_CUSTOMER
    results = [task.delay(customer, n, SECONDS)
               for n in range(JOBS_PER_CUSTOMER) for customer in CUSTOMERS]
    assert all(r.deduplicated is False for r in results)

    start_worker(pool="threads", concurrency=8)
    wait_until(lambda: len(events(prefix, "end")) >= total, timeout=60,
               message=f"{total} per_customer jobs to finish")
    starts, ends = events(prefix, "start"), events(prefix, "end")

    # Exactly once.
    started = Counter((e["customer"], e["n"]) for e in starts)
    ended = Counter((e["customer"], e["n"]) for e in ends)
    expected = {(c, n) for c in CUSTOMERS for n in range(JOBS_PER_CUSTOMER)}
    assert set(started) == expected and set(ended) == expected
    assert all(v == 1 for v in started.values()), started
    assert all(v == 1 for v in ended.values()), ended
    ns = [n for n in range(JOBS_PER_CUSTOMER) for _ in CUSTOMERS]
    assert all(r.get(timeout=10) == n for r, n in zip(results, ns, strict=True))

    # At most LIMIT per customer at any instant, and the limit is actually reached.
    for customer in CUSTOMERS:
        mine_starts = [e for e in starts if e["customer"] == customer]
        mine_ends = [e for e in ends if e["customer"] == customer]
        counted = max(e["running"] for e in mine_starts)
        computed = _max_overlap([e["t"] for e in mine_starts], [e["t"] for e in mine_ends])
        assert counted == LIMIT, f"{customer}: {counted} running at once (task counter)"
        assert computed == LIMIT, f"{customer}: {computed} overlapping runs (intervals)"

    # Customers run in parallel: well under the serial time.
    serial = total * SECONDS
    wall = max(e["t"] for e in ends) - min(e["t"] for e in starts)
    assert wall < 0.6 * serial, f"took {wall:.1f}s; serial would be {serial:.1f}s"
    assert _max_overlap([e["t"] for e in starts], [e["t"] for e in ends]) > LIMIT

    # Nothing left behind in the store: all completed, no slots, nothing blocked.
    def all_completed() -> bool:
        return all((inspect.job(r.id) or {}).get("st") == "completed" for r in results)

    wait_until(all_completed, timeout=10, message="all jobs completed in the store")
    for r, customer in zip(results, CUSTOMERS * JOBS_PER_CUSTOMER, strict=True):
        group = f'proj.per_customer:"{customer}"'
        assert (inspect.job(r.id) or {}).get("cg") == group
        assert inspect.slot_holders(group) == set(), (group, inspect.slot_holders(group))
    assert inspect.ids_in_state("blocked") == []
    assert inspect.blocked_groups() == set()
    assert inspect.ids_in_state("running") == []
    assert inspect.ids_in_state("failed") == []
    # With 30 jobs and 8 threads for 3 customers of 2 slots, jobs did wait for a slot.
    assert view.stats().get("blocked", 0) > 0, view.stats()
    for customer in CUSTOMERS:
        assert int(store.get(f"{prefix}:running:{customer}") or 0) == 0
