"""What the real-project runners share (``flask_run``, ``django_run``): a deployment that runs
the project's own pytest, one run's outcome, and the command line over configurations."""

from __future__ import annotations

import argparse
import subprocess
import sys
from dataclasses import dataclass

from .configs import CONFIGS, Config, Servers
from .deployment import Deployment, Process


class ProjectDeployment(Deployment):
    """A real project deployed per ``config``, whose own pytest tests run against it."""

    #: Interpreter options of the project's pytest run (``-W error::DeprecationWarning``).
    python_options: tuple[str, ...] = ()

    def start_worker(self, pool: str, concurrency: int, queues: list[str],
                     wait: bool = True) -> Process:
        """Start one worker of the project's app on ``queues``; wait until it is ready."""
        worker = self._start("worker", self._app_command(
            "worker", f"--pool={pool}", f"--concurrency={concurrency}",
            f"--queues={','.join(queues)}", f"--hostname=worker-{self.prefix}@%h",
            "--without-gossip", "--without-mingle", "--loglevel=INFO"))
        if wait:
            worker.wait_for_log(" ready.", timeout=60)
        return worker

    def run_tests(self, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """The project's own pytest run, in its directory, against the running worker (no
        plugin of this repository's environment auto-loaded: the project names its own)."""
        return subprocess.run([sys.executable, *self.python_options, "-m", "pytest", "-q"],
                              cwd=self.root,
                              env={**self.env, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
                              capture_output=True, text=True, timeout=timeout)


@dataclass
class ProjectRun:
    """One configuration's run of the project's tests."""

    config: str
    returncode: int
    output: str
    swapped: list[str]
    worker_log: str


def run_project(kind: type[ProjectDeployment], config: Config, servers: Servers) -> ProjectRun:
    """Deploy the project per ``config``, run its tests, remove the deployment."""
    deployment = kind(config, servers)
    try:
        deployment.start()
        done = deployment.run_tests()
        return ProjectRun(config.name, done.returncode, done.stdout + done.stderr,
                          [str(p.relative_to(deployment.root)) for p in deployment.swapped],
                          deployment.logs().get("worker", ""))
    finally:
        deployment.close()


def main(kind: type[ProjectDeployment], description: str, argv: list[str] | None = None) -> int:
    """``--config NAME`` (repeatable; default: every configuration), a line per run."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--config", action="append", choices=sorted(CONFIGS),
                        help="configurations to run (default: all)")
    parser.add_argument("--redis", default=Servers.redis)
    parser.add_argument("--postgres", default=Servers.postgres)
    args = parser.parse_args(argv)
    servers = Servers(redis=args.redis, postgres=args.postgres)
    failed = 0
    for name in args.config or list(CONFIGS):
        run = run_project(kind, CONFIGS[name], servers)
        last = run.output.strip().splitlines()[-1:] or ["(no output)"]
        print(f"{name}: {'pass' if run.returncode == 0 else 'FAIL'} — {last[0]}")
        if run.returncode:
            failed += 1
            print(run.output)
    return 1 if failed else 0
