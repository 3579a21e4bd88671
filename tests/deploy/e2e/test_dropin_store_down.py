"""Defect 8 of issue 12: a worker started while its store is down logs as Celery does —
"Cannot connect to plus+…: … Trying again in N seconds… (k/100)" — and starts serving once
the store is up, instead of logging "Connected…" / "Connection to broker lost" in a loop.

Each test chooses its broker (a port nothing listens on, then a ``redis-server`` of its own
started there); the shared servers are never touched.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.redis_servers import RedisServer, free_port

from . import proj
from .conftest import Worker, wait_until

CANNOT = re.compile(r"Cannot connect to plus\+\S+: (?s:.*?)"
                    r"Trying again in [\d.]+ seconds\.\.\. \(\d+/100\)")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis")  # not started: the store is down
    yield server
    server.stop()


@pytest.fixture(params=["redis", "postgres"])
def broker_url(request: pytest.FixtureRequest, server: RedisServer,
               monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "redis":
        url = f"plus+redis://127.0.0.1:{server.port}/0"
    else:
        url = f"plus+postgresql://postgres@127.0.0.1:{free_port()}/test"
    monkeypatch.setenv("PLUS_TEST_BROKER", url)
    return url


def test_a_worker_waits_for_its_store_as_celery_does(
        start_worker: Callable[..., Worker], server: RedisServer, broker_url: str,
        prefix: str) -> None:
    worker = start_worker(ready=False)
    wait_until(lambda: len(CANNOT.findall(worker.log())) >= 2 or worker.proc.poll() is not None,
               timeout=60, message="two 'Cannot connect' retries")
    log = worker.log()
    assert worker.proc.poll() is None, log
    assert "Connected to" not in log and "Connection to broker lost" not in log, log
    if not broker_url.startswith("plus+redis://"):
        return
    server.start()  # the store comes up: the worker connects and serves
    wait_until(lambda: " ready." in worker.log(), timeout=60, message="worker ready")
    app = proj.make_app(prefix)
    try:
        assert app.tasks["proj.add"].delay(2, 2).get(timeout=30) == 4
    finally:
        app.close()
