"""One isolated deployment of the project: its processes, its names, and its clean-up.

Every deployment gets a fresh prefix (``cmp<hex>``): its queue names, every Redis key it
writes (broker, results, recorded effects), its PostgreSQL schema and its temporary directory
derive from it, so deployments can run side by side on shared servers, and all of it is
deleted when the deployment ends.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
import redis

from .configs import Config, Servers
from .swap import materialise

PROJECT = Path(__file__).resolve().parent / "project"
REPO = PROJECT.parents[1]
#: Queues the worker serves (proj.settings.QUEUES, by suffix).
QUEUE_SUFFIXES = ("default", "urgent", "reports")
#: A result database distinct from the broker's, as deployments usually have.
RESULT_DB = 1


def cli_command(cli: str) -> list[str]:
    """The installed console script (``celery`` or ``celery-plus``) beside this interpreter."""
    script = Path(sys.executable).parent / cli
    if script.exists():
        return [str(script)]
    return [sys.executable, "-m", "celery" if cli == "celery" else "celery_plus.cli"]


class Process:
    """A long-running process of the deployment (worker or beat), logging to a file."""

    def __init__(self, name: str, cmd: list[str], cwd: Path, env: dict[str, str],
                 log: Path) -> None:
        self.name = name
        self.log_path = log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for_log(self, text: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.log():
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited ({self.proc.returncode}):\n{self.log()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} not ready after {timeout}s:\n{self.log()}")
            time.sleep(0.05)

    def terminate(self) -> None:
        """Ask for a warm shutdown (SIGTERM to the main process, which stops its children)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)

    def stop(self, timeout: float = 20) -> None:
        """Warm shutdown; SIGKILL to its whole process group if it does not exit in time."""
        if self.proc.poll() is None:
            self.terminate()
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()

    def kill(self) -> None:
        """SIGKILL to its whole process group (the worker's pool processes with it)."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)


class Deployment:
    """The project deployed per ``config``: started by :meth:`start`, removed by :meth:`close`."""

    #: The project's source (copied and swapped for celery-plus) and its ``-A`` app module.
    project: Path = PROJECT
    app_module = "proj"

    def __init__(self, config: Config, servers: Servers) -> None:
        self.config = config
        self.servers = servers
        self.prefix = f"cmp{uuid.uuid4().hex[:10]}"
        self.workdir = Path(tempfile.mkdtemp(prefix=f"{self.prefix}-"))
        self.worker_name = f"worker-{self.prefix}@{socket.gethostname()}"
        self.processes: list[Process] = []
        self.swapped: list[Path] = []
        if config.plus:
            self.root = self.workdir / "project"
            self.swapped = materialise(self.project, self.root)
        else:
            self.root = self.project

    @property
    def env(self) -> dict[str, str]:
        """The environment of every process of the deployment (the project's settings)."""
        return {
            **os.environ,
            "PROJ_BROKER_URL": self.config.broker_url(self.servers, self.workdir),
            "PROJ_RESULT_BACKEND": self.servers.redis_db(RESULT_DB),
            "PROJ_EFFECTS_URL": self.servers.redis_db(0),
            "PROJ_PREFIX": self.prefix,
            "PROJ_PG_SCHEMA": self.prefix,
            "PYTHONPATH": str(self.root),
            "PYTHONDONTWRITEBYTECODE": "1",
            **({"DJANGO_SETTINGS_MODULE": "djsite.settings",
                "PROJ_DJANGO_DB": str(self.workdir / "django.sqlite3")}
               if self.config.django else {}),
        }

    @property
    def cli(self) -> list[str]:
        return cli_command(self.config.cli)

    def _app_command(self, *args: str) -> list[str]:
        # `celery -A proj worker` for plain Celery; `celery-plus worker -A proj` for plus.
        if self.config.plus:
            return [*self.cli, args[0], "-A", self.app_module, *args[1:]]
        return [*self.cli, "-A", self.app_module, *args]

    def start(self, beat: bool = True) -> None:
        """Start the worker (the configuration's pool, 2 processes or threads, every queue)
        and beat; wait until ready."""
        queues = ",".join(f"{self.prefix}.{q}" for q in QUEUE_SUFFIXES)
        concurrency = {"solo": 1, "gevent": 4}.get(self.config.pool, 2)
        worker = self._start("worker", self._app_command(
            "worker", f"--pool={self.config.pool}", f"--concurrency={concurrency}",
            f"--queues={queues}",
            f"--hostname=worker-{self.prefix}@%h", "--without-gossip", "--without-mingle",
            "--loglevel=INFO"))
        if beat:
            self._start("beat", self._app_command(
                "beat", f"--schedule={self.workdir / 'beat-schedule'}", "--loglevel=INFO"))
        worker.wait_for_log(" ready.", timeout=60)

    def _start(self, name: str, cmd: list[str]) -> Process:
        process = Process(name, cmd, self.root, self.env, self.workdir / f"{name}.log")
        self.processes.append(process)
        return process

    def run_driver(self, scenarios: list[str], timeout: float) -> dict[str, Any]:
        """Run the scenarios in a client process of the deployment; return what it observed."""
        out = self.workdir / "observed.json"
        cmd = [sys.executable, "-m", "compat_suite.driver", "--worker", self.worker_name,
               "--cli", json.dumps(self.cli), "--out", str(out), "--pool", self.config.pool,
               *(["--django"] if self.config.django else []), *scenarios]
        env = {**self.env, "PYTHONPATH": os.pathsep.join([str(self.root), str(REPO)])}
        proc = subprocess.run(cmd, cwd=self.root, env=env, capture_output=True, text=True,
                              timeout=timeout)
        if proc.returncode != 0 or not out.exists():
            raise RuntimeError(f"scenario driver failed ({proc.returncode}):\n"
                               f"{proc.stdout}{proc.stderr}")
        observed: dict[str, Any] = json.loads(out.read_text())
        return observed

    def logs(self) -> dict[str, str]:
        return {p.name: p.log() for p in self.processes}

    def kill(self) -> None:
        """Kill every process at once, for a deployment whose observations are made: a warm
        shutdown of its worker and beat took 2.8-3.0 s and is not what the suite checks."""
        for process in self.processes:
            process.kill()

    def stop(self) -> None:
        """Stop every process (all asked at once, then waited for)."""
        for process in self.processes:
            process.terminate()
        for process in self.processes:
            process.stop()

    def close(self) -> None:
        """Stop every process, then delete the deployment's keys, schema and files."""
        self.stop()
        for db in (0, RESULT_DB):
            client = redis.Redis.from_url(self.servers.redis_db(db))
            keys = list(client.scan_iter(f"{self.prefix}*", count=1000))
            for i in range(0, len(keys), 500):
                client.delete(*keys[i:i + 500])
            client.close()
        if self.config.store == "postgres":
            with psycopg.connect(self.servers.postgres, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{self.prefix}" CASCADE')
        shutil.rmtree(self.workdir, ignore_errors=True)
