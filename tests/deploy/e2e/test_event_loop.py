"""Which loop a ``celery-plus worker`` runs, per pool (issue #13; ``transport/event_loop.py``).

The ``plus`` transport is asynchronous, so Celery runs its event loop (``asynloop``, the hub)
for the pools that use one with kombu's Redis transport: prefork (the default), threads and
solo; gevent and eventlet keep Celery's synchronous loop. On each store, with real workers:
the loop that runs is the expected one, every job runs once and its ack is stored.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from celery_plus.model.store import Backend
from tests.inspectors import inspector_for

from .conftest import Worker, wait_until

EVENT_LOOP = "consuming on Celery's event loop"


@pytest.mark.parametrize("pool, concurrency, evented", [
    ("prefork", 2, True), ("threads", 4, True), ("gevent", 10, False)])
def test_the_worker_runs_the_loop_celery_runs_for_its_pool(
        client: Any, view: Backend, start_worker: Callable[..., Worker],
        pool: str, concurrency: int, evented: bool) -> None:
    inspect = inspector_for(view)
    worker = start_worker(pool=pool, concurrency=concurrency)
    results = [client.send_task("proj.mark", (n,)) for n in range(20)]
    assert [r.get(timeout=30) for r in results] == list(range(20)), worker.log()
    wait_until(lambda: all((inspect.job(r.id) or {}).get("st") == "completed" for r in results),
               timeout=10, message="every ack stored")
    assert (EVENT_LOOP in worker.log()) is evented, worker.log()
    assert "Traceback" not in worker.log(), worker.log()
