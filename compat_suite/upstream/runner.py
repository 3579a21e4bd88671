"""One run of Celery's integration suite on one broker.

The run works in a workspace of its own: a copy of the suite's ``t/`` tree (so the sdist's
``celery/`` package, which sits beside ``t/`` in the sdist, is never imported instead of the
installed Celery), a ``pytest.ini`` carrying Celery's own pytest settings (markers, strict
markers and xfails, ``test_*`` classes) plus ``-p celery.contrib.pytest`` (the plugin Celery's
integration runs load), and, when the broker needs transport options, the
``integration-tests-config.json`` that the suite's conftest reads for overrides.

The environment is the suite's documented one: ``TEST_BROKER``, ``TEST_BACKEND`` (database 1
of the run's own ``redis-server``), ``REDIS_HOST``/``REDIS_PORT`` (the tasks' Redis). For a
``plus+`` broker, ``PYTHONPATH`` starts with ``shim/`` whose ``sitecustomize`` imports
``celery_plus.transport``; for ``redis://`` nothing of celery-plus is loaded.

pytest-rerunfailures is deliberately not installed: the suite's ``@flaky`` marks stay inert,
so each test must pass on its first try, on the reference as on celery-plus.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: pytest depends on tomli there
    import tomli as tomllib  # type: ignore[no-redef]

from .outcomes import Run, read_junit
from .servers import Broker

SHIM = Path(__file__).parent / "shim"

#: Modules of ``t/integration`` left out: result backends that need services this machine
#: does not run (Azure / Cosmos, a SQL database, the security serializer's certificates).
EXCLUDED = ("test_backend.py", "test_database_backend.py", "test_security.py")

#: Seconds a single test may take before pytest-timeout fails it (a test's own
#: ``@pytest.mark.timeout`` wins).
TEST_TIMEOUT_S = 240


def workspace_for(source: Path, workspace: Path, options: dict[str, str]) -> Path:
    """Lay out a fresh workspace: ``t/``, ``pytest.ini``, the suite's config overrides."""
    if workspace.exists():
        shutil.rmtree(workspace)
    workspace.mkdir(parents=True)
    shutil.copytree(source / "t", workspace / "t",
                    ignore=shutil.ignore_patterns("__pycache__", "unit", "smoke", "benchmarks"))
    ini = tomllib.loads((source / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    markers = "\n".join(f"    {m}" for m in ini.get("markers", []))
    (workspace / "pytest.ini").write_text(
        "[pytest]\n"
        f"addopts = {ini.get('addopts', '')} -p celery.contrib.pytest -p no:cacheprovider\n"
        f"python_classes = {ini.get('python_classes', 'test_*')}\n"
        f"xfail_strict = {str(ini.get('xfail_strict', False)).lower()}\n"
        f"markers =\n{markers}\n")
    if options:
        (workspace / "integration-tests-config.json").write_text(
            json.dumps({"broker_transport_options": options}))
    return workspace


def test_paths(workspace: Path, modules: list[str]) -> list[str]:
    """The suite's modules to run (all of ``t/integration`` but ``EXCLUDED`` by default)."""
    folder = workspace / "t" / "integration"
    wanted = modules or sorted(p.name for p in folder.glob("test_*.py"))
    missing = [m for m in wanted if not (folder / m).is_file()]
    if missing:
        raise ValueError(f"not in Celery's t/integration: {', '.join(missing)}")
    return [f"t/integration/{m}" for m in wanted if m not in EXCLUDED or m in modules]


def environment(broker: Broker, redis_port: int) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        TEST_BROKER=broker.url,
        TEST_BACKEND=f"redis://127.0.0.1:{redis_port}/1",
        REDIS_HOST="127.0.0.1",
        REDIS_PORT=str(redis_port),
        PYTHONDONTWRITEBYTECODE="1",
    )
    path = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(SHIM)]
    if broker.kind.startswith("plus+"):
        path.insert(0, str(SHIM))
    env["PYTHONPATH"] = os.pathsep.join(path)
    # Some tests run the `celery` command: the one of this interpreter's environment.
    scripts = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([scripts, *[p for p in env.get("PATH", "").split(os.pathsep)
                                              if p != scripts]])
    return env


def run_suite(source: Path, broker: Broker, redis_port: int, workspace: Path,
              modules: list[str], celery_version: str, pytest_args: Sequence[str] = (),
              log: Path | None = None, timeout: float | None = None) -> Run:
    """Run the suite on ``broker``; its outcomes (pytest's output goes to ``log``)."""
    workspace_for(source, workspace, broker.transport_options)
    junit = workspace / "junit.xml"
    command = [sys.executable, "-m", "pytest", *test_paths(workspace, modules),
               f"--junitxml={junit}", "-o", "junit_family=xunit1", f"--timeout={TEST_TIMEOUT_S}",
               "-q", "-rfE", *pytest_args]
    load_before = os.getloadavg()[0]
    started = time.monotonic()
    output = open(log, "w") if log is not None else subprocess.DEVNULL  # noqa: SIM115
    try:
        process = subprocess.Popen(command, cwd=workspace, env=environment(broker, redis_port),
                                   stdout=output, stderr=subprocess.STDOUT,
                                   start_new_session=True)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            # The session worker's pool processes are in the run's process group too.
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            raise RuntimeError(f"the suite on {broker.url} took more than {timeout:.0f}s"
                               + (f"; see {log}" if log else "")) from None
    finally:
        if log is not None:
            output.close()  # type: ignore[union-attr]
    seconds = time.monotonic() - started
    if not junit.is_file():
        raise RuntimeError(f"the suite on {broker.url} wrote no report"
                           + (f"; see {log}" if log else ""))
    outcomes, messages, durations = read_junit(junit)
    return Run(broker.kind if "://" not in broker.kind else broker.url, celery_version,
               outcomes, messages, round(seconds, 1), (load_before, os.getloadavg()[0]),
               list(modules), durations)
