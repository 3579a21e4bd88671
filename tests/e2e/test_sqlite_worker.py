"""A real ``celery-plus worker`` on the SQLite store: ``plus+sqlite:///<tmp_path>/broker.db``.

Acceptance: the durable transport works on the embedded SQLite backend end to end — a task
round-trips (results in Redis), a countdown job waits in the store and runs when due, a failing
task is dead-lettered with its details (read with ``SQLiteBackend.job``), a unique duplicate
coalesces into the holder, and the idle worker picks up a publish without polling delay.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from celery_plus.transport.sqlite_backend import SQLiteBackend

from . import proj
from .conftest import Worker, wait_until
from .proj import events


@pytest.fixture
def broker_url(tmp_path: Path) -> str:
    # tmp_path is absolute, so this is the four-slash form plus+sqlite:////tmp/.../broker.db.
    return f"plus+sqlite:///{tmp_path / 'broker.db'}"


@pytest.fixture
def sqlite_client(prefix: str, broker_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The test's client app on the SQLite broker (workers inherit PLUS_TEST_BROKER too)."""
    monkeypatch.setenv("PLUS_TEST_BROKER", broker_url)
    app = proj.make_app(prefix)
    yield app
    app.close()


@pytest.fixture
def sqlite_store(broker_url: str, sqlite_client: Any) -> Iterator[SQLiteBackend]:
    backend = SQLiteBackend(broker_url[len("plus+"):])
    yield backend
    backend.close()


@pytest.fixture
def sqlite_worker(start_worker: Callable[..., Worker], broker_url: str,
                  sqlite_client: Any) -> Callable[..., Worker]:
    def start(**kwargs: Any) -> Worker:
        env = {"PLUS_TEST_BROKER": broker_url, **kwargs.pop("env", {})}
        return start_worker(env=env, **kwargs)

    return start


def test_round_trip_and_wake_up_on_sqlite(sqlite_client, sqlite_worker, sqlite_store, prefix):
    worker = sqlite_worker()
    assert "plus+sqlite:///" in worker.log()
    result = sqlite_client.tasks["proj.add"].delay(2, 3)
    assert result.get(timeout=20) == 5
    # The ack is a batched settle: flushed with the next claim or by the keeper thread.
    record = wait_until(
        lambda: (r := sqlite_store.job(result.id)) and r["st"] == "completed" and r,
        message="add completed")
    assert record["name"] == "proj.add"
    assert record["q"] == "celery" and record["dl"] == "1"
    # Idle worker, one publish: it starts well before a poll interval would have passed.
    sent = time.time()
    sqlite_client.tasks["proj.mark"].delay(1)
    event = wait_until(lambda: events(prefix, "mark"), message="mark event")[0]
    assert event["n"] == 1
    assert event["t"] - sent < 5


def test_countdown_job_waits_in_the_store(sqlite_client, sqlite_worker, sqlite_store, prefix):
    sqlite_worker()
    sent = time.time()
    result = sqlite_client.tasks["proj.mark"].apply_async((7,), countdown=1.5)
    record = wait_until(lambda: sqlite_store.job(result.id), message="job stored")
    assert record["st"] in ("scheduled", "enqueued", "running", "completed")
    assert int(record["due"]) >= int(sent * 1000) + 1400
    marks = wait_until(lambda: events(prefix, "mark"), timeout=20, message="countdown ran")
    assert [m["n"] for m in marks] == [7]
    assert marks[0]["t"] >= sent + 1.4, "ran before its countdown"
    wait_until(lambda: (sqlite_store.job(result.id) or {}).get("st") == "completed",
               message="countdown job completed")


def test_failing_task_is_dead_lettered(sqlite_client, sqlite_worker, sqlite_store):
    sqlite_worker()
    result = sqlite_client.tasks["proj.fail"].delay("boom on sqlite")
    with pytest.raises(ValueError, match="boom on sqlite"):
        result.get(timeout=20)
    record = wait_until(
        lambda: (r := sqlite_store.job(result.id)) and r["st"] == "failed" and r,
        message="dead letter")
    assert record["reason"] == "task failed"
    assert record["etype"] == "ValueError" and record["emsg"] == "boom on sqlite"
    assert "Traceback" in record["tb"] or "ValueError" in record["tb"]
    message = json.loads(record["msg"])
    assert message["headers"]["task"] == "proj.fail"
    hist = json.loads(record["hist"])
    assert hist[-1]["outcome"] == "task failed" and hist[-1]["exc_type"] == "ValueError"


def test_unique_duplicate_coalesces_on_sqlite(sqlite_client, sqlite_worker, sqlite_store,
                                              prefix):
    sqlite_worker()
    task = sqlite_client.tasks["proj.unique_running"]
    first = task.delay("k1", 1.0)
    assert first.deduplicated is False
    wait_until(lambda: [e for e in events(prefix, "start") if e.get("key") == "k1"],
               message="holder started")
    duplicate = task.delay("k1", 1.0)
    assert duplicate.deduplicated is True and duplicate.id == first.id
    assert first.get(timeout=20) == "k1"
    starts = [e for e in events(prefix, "start") if e.get("key") == "k1"]
    assert len(starts) == 1
    wait_until(lambda: (sqlite_store.job(first.id) or {}).get("st") == "completed",
               message="holder completed")
    # The hold went with the holder: the same call is accepted again.
    again = task.delay("k1", 0.0)
    assert again.deduplicated is False and again.id != first.id
    assert again.get(timeout=20) == "k1"


def test_prefork_retries_and_replace_continue_the_job_on_sqlite(sqlite_client, sqlite_worker,
                                                                sqlite_store, prefix):
    # Pool children publish (retry, Task.replace) through their own SQLite connections.
    sqlite_worker(pool="prefork", concurrency=2)
    flaky = sqlite_client.tasks["proj.flaky"].delay("fk", 3)
    assert flaky.get(timeout=30) == 3
    attempts = [e["attempt"] for e in events(prefix, "attempt") if e.get("key") == "fk"]
    assert attempts == [1, 2, 3]
    record = wait_until(
        lambda: (r := sqlite_store.job(flaky.id)) and r["st"] == "completed" and r,
        message="flaky completed")
    assert [h["outcome"] for h in json.loads(record["hist"])] == ["retried", "retried"]
    replaced = sqlite_client.tasks["proj.replaced"].delay(2, 3)
    assert replaced.get(timeout=30) == 5
