"""Issue 30's course-like Django project (``compat_suite/django_project``: ``CELERY_``
namespace, autodiscovery, a router over three queues, retrying base and decorator-class tasks,
``task_postrun`` and ``after_setup_logger`` handlers, django-celery-beat, django-celery-results)
passes its own pytest-django tests under ``-W error::DeprecationWarning`` against a real prefork
worker, unchanged but for the import swap, on plus+redis and plus+postgresql — both in the
README's suite (the issue asks for both in CI: the parameter is ``project_store``, not a matrix
parameter, so tests/deploy/matrix.py runs both); the plain Celery reference in the long run."""

from __future__ import annotations

import pytest

from compat_suite.configs import CONFIGS, REFERENCE
from compat_suite.django_run import DJANGO_PROJECT, run_django_project
from compat_suite.swap import celery_imports

from .projects import SERVERS, assert_on_plain_celery, assert_on_plus, assert_passed

#: The project's tests (tests/test_tasks.py, tests/test_worker.py).
TESTS = 15


@pytest.mark.parametrize("project_store", ["redis", "postgres"])
def test_the_django_project_passes_its_own_tests_import_swapped(project_store: str) -> None:
    run = run_django_project(CONFIGS[f"plus-{project_store}"], SERVERS)
    assert_passed(run, TESTS)
    assert_on_plus(run, project_store, {"django_celery_example/celery.py",
                                      "django_celery_example/settings.py", "polls/base_task.py",
                                      "polls/tasks.py", "polls/views.py"})
    # The worker logs deprecations (PYTHONWARNINGS=default): none, as on plain Celery.
    assert "DeprecationWarning" not in run.worker_log, run.worker_log


@pytest.mark.long
def test_the_django_project_passes_its_own_tests_on_plain_celery() -> None:
    run = run_django_project(REFERENCE, SERVERS)
    assert_passed(run, TESTS)
    assert_on_plain_celery(run)
    assert "DeprecationWarning" not in run.worker_log, run.worker_log


def test_the_django_project_is_written_for_plain_celery() -> None:
    """No file of the project names celery_plus: the swap is the only change."""
    sources = {p: p.read_text() for p in DJANGO_PROJECT.rglob("*.py")}
    assert not [p for p, text in sources.items() if "celery_plus" in text]
    assert sum(bool(celery_imports(text)) for text in sources.values()) >= 6
