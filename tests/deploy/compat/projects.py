"""What the real projects' tests check of a run (test_flask_project, test_django_project)."""

from __future__ import annotations

from compat_suite.configs import Servers
from compat_suite.project_run import ProjectRun
from tests.fast.conformance.stores import PG_URL, REDIS_URL

SERVERS = Servers(redis=REDIS_URL.rsplit("/", 1)[0], postgres=PG_URL)
SCHEMES = {"redis": "redis://", "sqlite": "sqlite:///", "postgres": "postgresql://"}


def assert_passed(run: ProjectRun, tests: int) -> None:
    """The project's own pytest run passed all ``tests``."""
    assert run.returncode == 0, f"{run.output}\n--- worker log ---\n{run.worker_log}"
    assert f"{tests} passed" in run.output, run.output


def assert_on_plus(run: ProjectRun, store: str, swapped: set[str]) -> None:
    """Swapped files include ``swapped``; a celery-plus worker ran on ``store`` (Celery's
    banner, then celery-plus's start-up line)."""
    assert set(run.swapped) >= swapped, run.swapped
    assert f".> transport:   plus+{SCHEMES[store]}" in run.worker_log, run.worker_log
    assert "celery-plus: visibility timeout" in run.worker_log, run.worker_log


def assert_on_plain_celery(run: ProjectRun) -> None:
    """Nothing swapped, a plain Celery worker on redis://."""
    assert run.swapped == []
    assert ".> transport:   redis://" in run.worker_log, run.worker_log
    assert "celery-plus" not in run.worker_log, run.worker_log
