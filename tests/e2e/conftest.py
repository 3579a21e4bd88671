"""Fixtures for end-to-end tests: an isolated key prefix, real worker processes, polling."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

from . import proj

ROOT = Path(__file__).resolve().parents[2]
CELERY_PLUS = [sys.executable, "-m", "celery_plus.cli"]
PLAIN_CELERY = [sys.executable, "-m", "celery"]


def wait_until(predicate: Callable[[], Any], timeout: float = 30.0, interval: float = 0.05,
               message: str = "condition") -> Any:
    """Poll ``predicate`` until it returns a truthy value; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


class Worker:
    """A real ``celery-plus worker`` process."""

    def __init__(self, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.proc = proc
        self.log_path = log

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        """SIGKILL the worker and its pool children."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self, timeout: float = 20) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def prefix() -> Iterator[str]:
    name = f"t{uuid.uuid4().hex[:10]}"
    yield name
    client = redis.Redis.from_url(proj.REDIS_URL)
    keys = list(client.scan_iter(f"{name}:*", count=1000))
    for i in range(0, len(keys), 500):
        client.delete(*keys[i:i + 500])
    client.close()


@pytest.fixture
def store(prefix: str) -> redis.Redis:
    return redis.Redis.from_url(proj.REDIS_URL, decode_responses=True)


@pytest.fixture
def client(prefix: str) -> Iterator[Any]:
    app = proj.make_app(prefix)
    yield app
    app.close()


@pytest.fixture
def start_worker(prefix: str, tmp_path: Path) -> Iterator[Callable[..., Worker]]:
    workers: list[Worker] = []

    def start(*args: str, pool: str = "solo", concurrency: int = 1,
              env: dict[str, str] | None = None, ready: bool = True,
              cli: str = "celery-plus") -> Worker:
        log = tmp_path / f"worker-{len(workers)}.log"
        program = CELERY_PLUS if cli == "celery-plus" else PLAIN_CELERY
        cmd = [*program, "-A", "tests.e2e.proj", "worker", f"--pool={pool}",
               f"--concurrency={concurrency}", "--loglevel=INFO", "--without-gossip",
               "--without-mingle", f"--hostname=w{len(workers)}-{prefix}@%h", *args]
        full_env = {**os.environ, "PLUS_TEST_PREFIX": prefix, **(env or {})}
        with open(log, "wb") as out:
            proc = subprocess.Popen(cmd, cwd=ROOT, env=full_env, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        worker = Worker(proc, log)
        workers.append(worker)
        if ready:
            wait_until(lambda: " ready." in worker.log() or proc.poll() is not None,
                       timeout=30, message="worker ready")
            assert proc.poll() is None, worker.log()
        return worker

    yield start
    for worker in workers:
        worker.stop()
