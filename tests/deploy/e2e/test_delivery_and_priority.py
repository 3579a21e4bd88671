"""Acceptance line 1: "500 jobs across 2 queues and 3 priorities all complete exactly once;
priority order holds within a queue."

Two real workers split 500 jobs over two queues and three priorities, each run exactly once.
The order the store hands them out (0 first, FIFO within a priority, per queue) is proven on
every store by the channel suite, through kombu's API:
``tests/fast/channel/test_channel_behaviour.py::test_priorities_order_delivery_lowest_number_first_fifo_within_one``
(which replaced this module's single-worker ordering test).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable
from typing import Any

from celery_plus.model.store import Backend
from tests.inspectors import inspector_for

from .conftest import Worker, wait_until
from .proj import events

QUEUES = ("q1", "q2")
PRIORITIES = (0, 5, 9)
TOTAL = 500


def _publish(client: Any, seed: int) -> list[tuple[int, str, int]]:
    """Publish TOTAL ``mark`` jobs in a shuffled mix of queues and priorities.

    Returns ``(n, queue, priority)`` in publish order (n is the publish index).
    """
    rng = random.Random(seed)
    mark = client.tasks["proj.mark"]
    published: list[tuple[int, str, int]] = []
    for n in range(TOTAL):
        queue = QUEUES[rng.randrange(len(QUEUES))]
        priority = PRIORITIES[rng.randrange(len(PRIORITIES))]
        result = mark.apply_async(kwargs={"n": n, "queue": queue, "priority": priority},
                                  queue=queue, priority=priority)
        assert result.deduplicated is False
        published.append((n, queue, priority))
    return published


def _wait_all_marked(prefix: str, timeout: float = 60) -> list[dict[str, Any]]:
    wait_until(lambda: len(events(prefix, "mark")) >= TOTAL, timeout=timeout,
               message=f"{TOTAL} mark events")
    return events(prefix, "mark")


def _assert_exactly_once(marks: list[dict[str, Any]]) -> None:
    counts = Counter(e["n"] for e in marks)
    assert set(counts) == set(range(TOTAL)), sorted(set(range(TOTAL)) - set(counts))[:20]
    twice = {n: c for n, c in counts.items() if c != 1}
    assert not twice, f"jobs run more than once: {twice}"


def _assert_store_settled(view: Backend) -> None:
    """Every job ended completed; nothing is left queued, running or dead."""
    def settled() -> bool:
        return (len(inspector_for(view).ids_in_state("completed")) == TOTAL
                and not inspector_for(view).ids_in_state("running"))

    wait_until(settled, timeout=20, message="all jobs completed in the store")
    for queue in QUEUES:
        assert view.size(queue) == 0
    assert inspector_for(view).ids_in_state("failed") == []
    assert inspector_for(view).ids_in_state("enqueued") == []


def test_two_workers_split_the_load_exactly_once(
    client: Any, start_worker: Callable[..., Worker], prefix: str, view: Backend
) -> None:
    args = ("-Q", ",".join(QUEUES), "--prefetch-multiplier=1")
    workers = [start_worker(*args), start_worker(*args)]
    _publish(client, seed=7)
    marks = _wait_all_marked(prefix)
    _assert_exactly_once(marks)

    by_pid = Counter(e["pid"] for e in marks)
    assert set(by_pid) <= {w.proc.pid for w in workers}, by_pid
    assert len(by_pid) == 2, f"both workers should have taken jobs: {by_pid}"
    _assert_store_settled(view)
