"""One store and its worker processes for the long schedule and rate-limit runs
(``long_periodic.py``, ``long_rate_limits.py``): what ``tests/deploy/e2e/conftest.py``'s fixtures do
for a test, as a context manager for a script.

The store: ``redis`` (``plus+redis://`` on ``PLUS_TEST_REDIS``, a key prefix of its own),
``sqlite`` (a database file in a temporary folder) or ``postgres`` (``PLUS_TEST_PG``, a
schema of its own); cleaned up on exit. Processes run :mod:`tests.deploy.e2e.periodic_proj`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import redis

from celery_plus.model.options import StoreOptions
from celery_plus.model.store import Backend
from celery_plus.stores.postgres.backend import PostgresBackend
from celery_plus.stores.redis.backend import RedisBackend
from celery_plus.stores.sqlite.backend import SQLiteBackend
from tests.deploy.e2e import proj
from tests.deploy.e2e.periodic_checks import CELERY_PLUS, ROOT, Beat
from tests.fast.conformance.stores import PG_URL
from tests.support import drop_pg_schema

APP = "tests.deploy.e2e.periodic_proj"
STORES = ("redis", "sqlite", "postgres")


def store_arguments(description: str) -> argparse.ArgumentParser:
    """A long run's command line: ``--store`` and the run's own options (added by it)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--store", choices=STORES, required=True)
    return parser


def report(result: dict[str, object], default_file: str) -> int:
    """Print the run's JSON report, append it to ``PLUS_LONG_REPORT`` (or ``default_file``);
    the exit status: 0 if the run's checks held. The machine's load averages (1, 5, 15
    minutes) at the end of the run go with it."""
    line = json.dumps({**result, "load_at_end": [round(x, 2) for x in os.getloadavg()]})
    print(line)
    with open(Path(os.environ.get("PLUS_LONG_REPORT", default_file)), "a") as out:
        out.write(line + "\n")
    return 0 if result["ok"] else 1


@dataclass
class Deployment:
    store: str
    prefix: str
    url: str
    folder: Path
    env: dict[str, str]
    view: Backend
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    beats: list[Beat] = field(default_factory=list)

    def worker(self, pool: str = "prefork", concurrency: int = 2) -> subprocess.Popen[bytes]:
        n = len(self.processes)
        log = open(self.folder / f"worker-{n}.log", "ab")  # noqa: SIM115 (kept by the child)
        proc = subprocess.Popen(
            [*CELERY_PLUS, "-A", APP, "worker", f"--pool={pool}", f"--concurrency={concurrency}",
             "--loglevel=INFO", "--without-gossip", "--without-mingle",
             f"--hostname=w{n}-{self.prefix}@%h"],
            cwd=ROOT, env={**os.environ, **self.env}, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)
        self.processes.append(proc)
        return proc

    def beat(self) -> Beat:
        beat = Beat(self.folder / f"beat-{len(self.beats)}.log", self.env)
        self.beats.append(beat)
        return beat

    def events(self, kind: str) -> list[dict[str, object]]:
        return proj.events(self.prefix, kind)

    def stop(self) -> None:
        for beat in self.beats:
            beat.stop()
        for proc in self.processes:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.processes:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)


@contextlib.contextmanager
def deployment(store: str, **env: str) -> Iterator[Deployment]:
    prefix = f"long{uuid.uuid4().hex[:8]}"
    with tempfile.TemporaryDirectory(prefix="plus-long-") as tmp:
        folder = Path(tmp)
        view: Backend
        if store == "sqlite":
            url = f"plus+sqlite:///{folder / 'broker.db'}"
            view = SQLiteBackend(url.removeprefix("plus+"))
        elif store == "postgres":
            url = f"plus+{PG_URL}"
            view = PostgresBackend(PG_URL, schema=proj.pg_schema(prefix))
        else:
            url = f"plus+{proj.REDIS_URL}"
            view = RedisBackend(proj.REDIS_URL, StoreOptions(prefix=prefix))
        dep = Deployment(store, prefix, url, folder,
                         {"PLUS_TEST_PREFIX": prefix, "PLUS_TEST_BROKER": url, **env}, view)
        try:
            yield dep
        finally:
            dep.stop()
            view.close()
            keep = os.environ.get("PLUS_LONG_KEEP_LOGS")
            if keep:
                for log in folder.glob("*.log"):
                    Path(keep).mkdir(parents=True, exist_ok=True)
                    (Path(keep) / f"{store}-{log.name}").write_bytes(log.read_bytes())
            client = redis.Redis.from_url(proj.REDIS_URL)
            keys = list(client.scan_iter(f"{prefix}:*", count=1000))
            for i in range(0, len(keys), 500):
                client.delete(*keys[i:i + 500])
            client.close()
            if store == "postgres":
                drop_pg_schema(PG_URL, proj.pg_schema(prefix))
