"""Chords on the SQLite result backend (``plus+sqlite:``) with real worker processes.

Acceptance lines covered: with ``result_backend="plus+sqlite:///..."`` a chord's body runs once
with every header result, counted by the backend's atomic ``incr`` from several worker
processes (no ``celery.chord_unlock`` task is ever published), both on the Redis store and
entirely on SQLite (broker and results in one file); and ``backend="plus+redis://..."``
behaves as Celery's Redis result backend.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from celery import chord

from . import proj
from .conftest import Worker
from .proj import events

TIMEOUT = 30


def job_names(broker: str, prefix: str, db: Path) -> set[str]:
    """Names of every task message the durable store received."""
    if broker == "sqlite":
        with sqlite3.connect(db) as conn:
            return {name for (name,) in conn.execute("SELECT name FROM jobs")}
    client = redis.Redis.from_url(proj.REDIS_URL, decode_responses=True)
    try:
        return {client.hget(key, "name") or "" for key in client.scan_iter(f"{prefix}:job:*")}
    finally:
        client.close()


@pytest.fixture(params=["redis", "sqlite"])
def broker(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "store.db"


@pytest.fixture
def worker_env(broker: str, db: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    env = {"PLUS_TEST_RESULTS": f"plus+sqlite:///{db}"}
    if broker == "sqlite":
        env["PLUS_TEST_BROKER"] = f"plus+sqlite:///{db}"
    for name, value in env.items():
        monkeypatch.setenv(name, value)  # the client's make_app reads PLUS_TEST_BROKER
    return env


@pytest.fixture
def sqlite_results_client(prefix: str, worker_env: dict[str, str]) -> Iterator[Any]:
    app = proj.make_app(prefix, result_backend=worker_env["PLUS_TEST_RESULTS"])
    yield app
    app.close()


def test_chord_counts_header_results_with_incr_across_workers(
        broker: str, db: Path, prefix: str, worker_env: dict[str, str],
        sqlite_results_client: Any, start_worker: Callable[..., Worker]) -> None:
    client = sqlite_results_client
    assert client.backend.implements_incr
    assert client.backend.path == str(db)
    for _ in range(2):  # two processes, four threads each, share the counter
        start_worker(pool="threads", concurrency=4, env=worker_env)
    add, tsum = client.tasks["proj.add"], client.tasks["proj.tsum"]

    result = chord(add.s(i, i) for i in range(12))(tsum.s())

    assert result.get(timeout=TIMEOUT) == sum(2 * i for i in range(12))
    # The body ran exactly once, with every header result.
    runs = events(prefix, "tsum")
    assert len(runs) == 1
    assert sorted(runs[0]["numbers"]) == [2 * i for i in range(12)]
    # The header results were counted by incr: no chord_unlock task polled for them.
    assert job_names(broker, prefix, db) == {"proj.add", "proj.tsum"}
    # And the results are rows of the SQLite file.
    with sqlite3.connect(db) as conn:
        stored = conn.execute(
            "SELECT COUNT(*) FROM celery_plus_results WHERE key LIKE 'celery-task-meta-%'"
        ).fetchone()[0]
    assert stored >= 13


def test_plus_redis_result_url_is_the_redis_result_backend(
        prefix: str, start_worker: Callable[..., Worker]) -> None:
    url = proj.RESULT_URL.replace("redis://", "plus+redis://", 1)
    client = proj.make_app(prefix, result_backend=url)
    try:
        start_worker(env={"PLUS_TEST_RESULTS": url})
        assert type(client.backend).__name__ == "RedisBackend"
        assert client.tasks["proj.add"].delay(20, 22).get(timeout=TIMEOUT) == 42
        result = chord(client.tasks["proj.add"].s(i, 1) for i in range(3))(
            client.tasks["proj.tsum"].s())
        assert result.get(timeout=TIMEOUT) == 6
    finally:
        client.close()
