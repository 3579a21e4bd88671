"""Acceptance lines 6 and 7 of the foundation issue: poison messages and failures.

6. "A task that kills its own process every time is dead-lettered after max_deliveries, with the
   reason."
7. "A task that raises (no retry) lands in the dead-letter store with exception type, message and
   traceback; autoretry_for with backoff that succeeds on the 3rd attempt keeps its unique hold
   throughout and completes once."  Plus the hard time limit case (reason "time limit").

Runs on each durable store (``broker_kind``: Redis, SQLite and PostgreSQL).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from celery.exceptions import TimeLimitExceeded

from celery_plus.model.store import Backend
from tests.inspectors import inspector_for

from .conftest import Worker, wait_until
from .proj import events

VT = {"PLUS_TEST_VT": "2"}
#: Prefork: notice a dead child after 1 s instead of Celery's default 10 s (worker_lost_wait).
PREFORK = {**VT, "PLUS_TEST_LOST_WAIT": "1"}
SUICIDE_MAX_DELIVERIES = 3


def _state(view: Backend, task_id: str) -> str | None:
    return (inspector_for(view).job(task_id) or {}).get("st")


def _assert_dead_lettered(view: Backend, task_id: str, reason: str) -> dict[str, str]:
    record = inspector_for(view).job(task_id) or {}
    assert record.get("st") == "failed", record
    assert record["reason"] == reason, record
    assert task_id in inspector_for(view).ids_in_state("failed")
    assert inspector_for(view).lease_deadline(task_id) is None
    return record


def test_self_killing_task_is_dead_lettered_prefork(
    client: Any, start_worker: Callable[..., Worker], prefix: str, view: Backend
) -> None:
    worker = start_worker(pool="prefork", concurrency=1, env=PREFORK)
    result = client.tasks["proj.suicide"].delay()
    wait_until(lambda: _state(view, result.id) == "failed", timeout=40,
               message="suicide dead-lettered")

    record = _assert_dead_lettered(view, result.id, "delivery limit")
    starts = events(prefix, "start")
    assert len(starts) == SUICIDE_MAX_DELIVERIES, starts
    assert len({e["pid"] for e in starts}) == SUICIDE_MAX_DELIVERIES  # a new child each time
    assert record["dl"] == str(SUICIDE_MAX_DELIVERIES), record
    assert len(json.loads(record["hist"])) >= SUICIDE_MAX_DELIVERIES, record["hist"]
    # The worker survives its children and keeps serving.
    assert worker.proc.poll() is None
    assert client.tasks["proj.add"].delay(2, 3).get(timeout=20) == 5
    assert len(events(prefix, "start")) == SUICIDE_MAX_DELIVERIES


def test_self_killing_task_is_dead_lettered_solo(
    client: Any, start_worker: Callable[..., Worker], prefix: str, view: Backend
) -> None:
    """The whole worker dies each time; its lease expires and the next worker recovers it."""
    result = client.tasks["proj.suicide"].delay()
    deaths = 0
    for _ in range(SUICIDE_MAX_DELIVERIES + 2):
        worker = start_worker(pool="solo", env=VT, ready=False)
        wait_until(lambda w=worker: w.proc.poll() is not None
                   or _state(view, result.id) == "failed",
                   timeout=30, message="worker death or dead letter")
        if _state(view, result.id) == "failed":
            break
        deaths += 1
    else:
        pytest.fail(f"not dead-lettered after {deaths} worker deaths")

    record = _assert_dead_lettered(view, result.id, "delivery limit")
    assert deaths == SUICIDE_MAX_DELIVERIES
    starts = events(prefix, "start")
    assert len(starts) == SUICIDE_MAX_DELIVERIES, starts
    assert record["dl"] == str(SUICIDE_MAX_DELIVERIES), record
    # The surviving worker recovered the last expired lease and reported the dead letter.
    assert worker.proc.poll() is None
    wait_until(lambda: "dead-lettered" in worker.log(), timeout=10,
               message="dead letter logged")
    assert "recovered job" in worker.log()
    assert client.tasks["proj.add"].delay(1, 1).get(timeout=20) == 2


def test_failing_task_is_dead_lettered_with_details(
    client: Any, start_worker: Callable[..., Worker], prefix: str, view: Backend
) -> None:
    start_worker()
    message = "boom: the input was bad"
    result = client.tasks["proj.fail"].delay(message)
    with pytest.raises(ValueError, match="the input was bad"):
        result.get(timeout=20)
    wait_until(lambda: _state(view, result.id) == "failed", timeout=10,
               message="fail dead-lettered")

    record = _assert_dead_lettered(view, result.id, "task failed")
    assert record["etype"] == "ValueError", record
    assert record["emsg"] == message, record
    assert "ValueError" in record["tb"] and "raise ValueError" in record["tb"], record["tb"]
    hist = json.loads(record["hist"])
    assert len(hist) == 1, hist
    assert hist[0]["exc_type"] == "ValueError", hist
    assert hist[0]["exc_message"] == message, hist
    assert record["dl"] == "1", record
    # The message is kept as it was delivered, for a later retry from the dead-letter store.
    assert json.loads(record["msg"])["headers"]["task"] == "proj.fail"


def test_autoretry_keeps_unique_hold_and_completes_once(
    client: Any, start_worker: Callable[..., Worker], prefix: str, view: Backend
) -> None:
    start_worker()
    flaky = client.tasks["proj.flaky"]
    result = flaky.delay("k1", 3)
    assert result.deduplicated is False

    def holds() -> dict[str, str]:
        return inspector_for(view).holds()

    checked = 0
    for attempt in (1, 2):
        wait_until(lambda a=attempt: any(e["attempt"] == a for e in events(prefix, "attempt")),
                   timeout=20, message=f"attempt {attempt}")
        # Between attempts (backoff 1 s, then 2 s) the hold stays with the job ...
        assert list(holds().values()) == [result.id], holds()
        # ... so a duplicate coalesces into it.
        duplicate = flaky.delay("k1", 3)
        assert duplicate.deduplicated is True
        assert duplicate.id == result.id
        checked += 1
    assert checked == 2

    assert result.get(timeout=30) == 3
    wait_until(lambda: _state(view, result.id) == "completed", timeout=10,
               message="flaky completed")
    attempts = events(prefix, "attempt")
    assert [e["attempt"] for e in attempts] == [1, 2, 3], attempts
    assert holds() == {}, holds()
    assert inspector_for(view).ids_in_state("failed") == []
    # Released: the same arguments now start a new job.
    again = flaky.delay("k1", 3)
    assert again.deduplicated is False
    assert again.id != result.id


def test_hard_time_limit_is_dead_lettered(
    client: Any, start_worker: Callable[..., Worker], prefix: str, view: Backend
) -> None:
    worker = start_worker(pool="prefork", concurrency=1, env=PREFORK)
    result = client.tasks["proj.hard_limit"].delay()
    with pytest.raises(TimeLimitExceeded):
        result.get(timeout=20)
    wait_until(lambda: _state(view, result.id) == "failed", timeout=10,
               message="hard_limit dead-lettered")

    record = _assert_dead_lettered(view, result.id, "time limit")
    assert "TimeLimitExceeded" in record["etype"], record
    assert record["dl"] == "1", record
    assert worker.proc.poll() is None
    assert client.tasks["proj.add"].delay(3, 4).get(timeout=20) == 7
