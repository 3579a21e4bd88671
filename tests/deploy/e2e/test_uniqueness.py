"""Acceptance line 2: uniqueness windows — running, pending and TTL — end to end.

* running: concurrent duplicates (50 calls from 5 threads) and duplicates sent while the holder
  runs all coalesce into the holder (same id, ``.deduplicated``); the body runs once; the hold
  is released when the holder finishes.
* pending: a duplicate coalesces while the holder waits, and is accepted once it runs.
* ttl: a duplicate coalesces for the TTL after enqueue, even after the holder completed;
  once the TTL expires the key is free again.
* ``unique_on_duplicate="raise"`` raises ``DuplicateTask`` carrying the holder's id.
* ``task_deduplicated`` fires in the publishing process with task_id / holder_id / unique_key.

Runs on each durable store (``broker_kind``: Redis, SQLite and PostgreSQL).
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from celery_plus import signals
from celery_plus.exceptions import DuplicateTask
from celery_plus.model.store import Backend
from tests.inspectors import inspector_for

from .conftest import Worker, wait_until
from .proj import events

THREADS = 5
CALLS_PER_THREAD = 10


def _starts(prefix: str, key: str) -> list[dict[str, Any]]:
    return [e for e in events(prefix, "start") if e.get("key") == key]




class _Dedups:
    """Collects ``task_deduplicated`` signals sent in this process."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def __call__(self, sender: Any = None, **kwargs: Any) -> None:
        with self._lock:
            self.seen.append({"sender": sender, **{k: v for k, v in kwargs.items()
                                                    if k != "signal"}})


@pytest.fixture
def dedups() -> Any:
    receiver = _Dedups()
    signals.task_deduplicated.connect(receiver, weak=False)
    yield receiver
    signals.task_deduplicated.disconnect(receiver)


def test_running_window_coalesces_concurrent_and_running_duplicates(
    client: Any, start_worker: Callable[..., Worker], prefix: str, view: Backend,
    dedups: _Dedups,
) -> None:
    task = client.tasks["proj.unique_running"]
    key, seconds = "rw", 4.0
    start_worker()

    # 50 racing publishes with the same key from 5 threads: exactly one is accepted.
    barrier = threading.Barrier(THREADS)
    results: list[Any] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def publish() -> None:
        try:
            barrier.wait(timeout=10)
            for _ in range(CALLS_PER_THREAD):
                result = task.delay(key, seconds)
                with lock:
                    results.append(result)
        except BaseException as exc:  # reported below
            with lock:
                errors.append(exc)

    threads = [threading.Thread(target=publish) for _ in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not errors, errors
    assert len(results) == THREADS * CALLS_PER_THREAD

    accepted = [r for r in results if r.deduplicated is False]
    assert len(accepted) == 1, [(r.id, r.deduplicated) for r in results]
    holder = accepted[0]
    duplicates = [r for r in results if r is not holder]
    assert len(duplicates) == 49
    assert all(r.deduplicated is True for r in duplicates)
    assert {r.id for r in duplicates} == {holder.id}
    assert len(dedups.seen) == 49
    assert {d["holder_id"] for d in dedups.seen} == {holder.id}

    # While the holder runs, duplicates still coalesce into it.
    wait_until(lambda: _starts(prefix, key), timeout=20, message="holder started")
    while_running = [task.delay(key, seconds) for _ in range(10)]
    assert not [e for e in events(prefix, "end") if e.get("key") == key], \
        "holder finished before the running-window duplicates were sent; raise `seconds`"
    assert all(r.deduplicated is True and r.id == holder.id for r in while_running)
    record = inspector_for(view).job(holder.id) or {}
    assert record.get("st") == "running", record
    assert inspector_for(view).holds() == {record["uk"]: holder.id}

    assert holder.get(timeout=30) == key
    assert len(_starts(prefix, key)) == 1, "the task body ran more than once"

    # The hold is released when the holder completes: the next publish is accepted and runs.
    wait_until(lambda: not inspector_for(view).holds(), timeout=10, message="hold released")
    again = task.delay(key, 0.1)
    assert again.deduplicated is False and again.id != holder.id
    assert again.get(timeout=30) == key
    assert len(_starts(prefix, key)) == 2


def test_pending_window_coalesces_only_while_waiting(
    client: Any, start_worker: Callable[..., Worker], prefix: str, view: Backend
) -> None:
    task = client.tasks["proj.unique_pending"]
    key, seconds = "pw", 2.0

    first = task.delay(key, seconds)  # no worker yet: it waits
    assert first.deduplicated is False
    waiting_dup = task.delay(key, seconds)
    assert waiting_dup.deduplicated is True and waiting_dup.id == first.id
    assert (inspector_for(view).job(first.id) or {}).get("st") == "enqueued"
    assert list(inspector_for(view).holds().values()) == [first.id]

    start_worker()
    wait_until(lambda: _starts(prefix, key), timeout=20, message="holder started")
    # The holder runs: the pending hold is gone, so a new publish is accepted.
    running_dup = task.delay(key, seconds)
    assert running_dup.deduplicated is False and running_dup.id != first.id

    assert first.get(timeout=30) == key
    assert running_dup.get(timeout=30) == key
    starts = _starts(prefix, key)
    assert len(starts) == 2
    # The solo worker ran the accepted duplicate after the holder's body (sleep `seconds`).
    assert starts[1]["t"] >= starts[0]["t"] + seconds * 0.95
    for job_id in (first.id, running_dup.id):
        wait_until(lambda j=job_id: (inspector_for(view).job(j) or {}).get("st") == "completed",
                   timeout=10, message=f"job {job_id} completed in the store")


def test_ttl_window_holds_after_completion_until_expiry(
    client: Any, start_worker: Callable[..., Worker], prefix: str, view: Backend
) -> None:
    task = client.tasks["proj.unique_ttl"]  # unique_ttl=2 s
    key = "tw"
    start_worker()

    published_at = time.monotonic()
    first = task.delay(key)
    assert first.deduplicated is False
    assert first.get(timeout=30) == key
    wait_until(lambda: (inspector_for(view).job(first.id) or {}).get("st") == "completed",
               timeout=10, message="holder completed in the store")

    # Completed, but inside the TTL: a duplicate still coalesces into the holder.
    dup_id = f"dup-{uuid.uuid4()}"
    dup = task.apply_async((key,), task_id=dup_id)
    elapsed = time.monotonic() - published_at
    assert dup.deduplicated is True and dup.id == first.id, \
        f"duplicate accepted {elapsed:.2f}s after the holder's enqueue (TTL is 2 s)"
    assert inspector_for(view).job(dup_id) is None
    assert list(inspector_for(view).holds().values()) == [first.id]

    # After the TTL the key is free again and the task runs a second time.
    wait_until(lambda: not inspector_for(view).holds(), timeout=10, message="TTL hold expired")
    again = task.delay(key)
    assert again.deduplicated is False and again.id != first.id
    assert again.get(timeout=30) == key
    assert len(_starts(prefix, key)) == 2


def test_unique_on_duplicate_raise(
    client: Any, prefix: str, view: Backend, dedups: _Dedups
) -> None:
    task = client.tasks["proj.unique_raise"]
    first = task.delay("rk")
    assert first.deduplicated is False

    dup_id = f"dup-{uuid.uuid4()}"
    with pytest.raises(DuplicateTask) as info:
        task.apply_async(("rk",), task_id=dup_id)
    assert info.value.holder_id == first.id
    assert info.value.unique_key
    assert inspector_for(view).holder(info.value.unique_key) == first.id
    assert inspector_for(view).job(dup_id) is None
    assert [d["task_id"] for d in dedups.seen] == [dup_id]

    # A different key is not a duplicate.
    other = task.delay("other")
    assert other.deduplicated is False and other.id != first.id


def test_task_deduplicated_signal_in_publishing_process(
    client: Any, prefix: str, view: Backend, dedups: _Dedups
) -> None:
    task = client.tasks["proj.unique_pending"]
    holder = task.delay("sig", 0.1)
    assert dedups.seen == []

    dup_id = f"dup-{uuid.uuid4()}"
    dup = task.apply_async(("sig", 0.1), task_id=dup_id)
    assert dup.deduplicated is True and dup.id == holder.id
    assert len(dedups.seen) == 1
    seen = dedups.seen[0]
    assert seen["sender"] == "proj.unique_pending"
    assert seen["task_id"] == dup_id
    assert seen["holder_id"] == holder.id
    assert seen["unique_key"].startswith("proj.unique_pending:")
    assert inspector_for(view).holder(seen["unique_key"]) == holder.id
