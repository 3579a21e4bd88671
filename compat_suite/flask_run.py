"""The second real project: a Flask app with Celery tasks (``compat_suite/flask_project``,
Flask's "Background Tasks with Celery" pattern), written as a plain Celery project, run with
its own pytest tests (Flask's test client) against a real worker — unchanged on plain Celery,
import-swapped (``compat_suite/swap.py``) on each ``plus+`` store.

    python -m compat_suite.flask_run                      # every configuration
    python -m compat_suite.flask_run --config plus-sqlite

Each run is one :class:`FlaskDeployment` (its own prefix for the queue, Redis keys and
PostgreSQL schema; removed afterwards). The project reads its settings Flask's way
(``app.config.from_prefixed_env()``), so the deployment sets ``FLASK_CELERY__…`` variables and
the project's files stay as written.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .configs import CONFIGS, Config, Servers
from .deployment import RESULT_DB, Deployment

FLASK_PROJECT = Path(__file__).resolve().parent / "flask_project"


class FlaskDeployment(Deployment):
    """The Flask project deployed per ``config``: one worker of ``make_celery``."""

    project = FLASK_PROJECT
    app_module = "make_celery"

    @property
    def env(self) -> dict[str, str]:
        keyprefix = json.dumps({"global_keyprefix": f"{self.prefix}:"})
        celery = {
            "broker_url": self.config.broker_url(self.servers, self.workdir),
            "result_backend": self.servers.redis_db(RESULT_DB),
            "broker_transport_options": keyprefix,
            "result_backend_transport_options": keyprefix,
            "task_default_queue": self.prefix,
            "broker_connection_retry_on_startup": "true",
            # celery-plus's settings; plain Celery ignores them.
            "plus_key_prefix": self.prefix,
            "plus_pg_schema": self.prefix,
        }
        return {**super().env, **{f"FLASK_CELERY__{k}": v for k, v in celery.items()}}

    def start(self, beat: bool = False) -> None:
        """Start one worker (threads pool, 2 threads) on the project's queue; wait until
        ready."""
        worker = self._start("worker", self._app_command(
            "worker", "--pool=threads", "--concurrency=2", f"--queues={self.prefix}",
            f"--hostname=worker-{self.prefix}@%h", "--without-gossip", "--without-mingle",
            "--loglevel=INFO"))
        worker.wait_for_log(" ready.", timeout=60)

    def run_tests(self, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """The project's own pytest run, in its directory, against the running worker (no
        plugin of this repository's environment loaded: the project uses none)."""
        return subprocess.run([sys.executable, "-m", "pytest", "-q"], cwd=self.root,
                              env={**self.env, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
                              capture_output=True, text=True, timeout=timeout)


@dataclass
class FlaskRun:
    """One configuration's run of the project's tests."""

    config: str
    returncode: int
    output: str
    swapped: list[str]
    worker_log: str


def run_flask_project(config: Config, servers: Servers) -> FlaskRun:
    """Deploy the Flask project per ``config``, run its tests, remove the deployment."""
    deployment = FlaskDeployment(config, servers)
    try:
        deployment.start()
        done = deployment.run_tests()
        return FlaskRun(config.name, done.returncode, done.stdout + done.stderr,
                        [str(p.relative_to(deployment.root)) for p in deployment.swapped],
                        deployment.logs().get("worker", ""))
    finally:
        deployment.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", action="append", choices=sorted(CONFIGS),
                        help="configurations to run (default: all)")
    parser.add_argument("--redis", default=Servers.redis)
    parser.add_argument("--postgres", default=Servers.postgres)
    args = parser.parse_args(argv)
    servers = Servers(redis=args.redis, postgres=args.postgres)
    failed = 0
    for name in args.config or list(CONFIGS):
        run = run_flask_project(CONFIGS[name], servers)
        last = run.output.strip().splitlines()[-1:] or ["(no output)"]
        print(f"{name}: {'pass' if run.returncode == 0 else 'FAIL'} — {last[0]}")
        if run.returncode:
            failed += 1
            print(run.output)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
