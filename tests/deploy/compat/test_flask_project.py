"""Issue 30's second real project: the Flask app of ``compat_suite/flask_project`` (Flask's
"Background Tasks with Celery" pattern) passes its own pytest tests (Flask's test client, a
real worker) as a plain Celery project, and unchanged but for the import swap on each ``plus+``
store. Every store in the README's suite (issue #30 asks for every store there: the parameter is
``project_store``, which tests/deploy/matrix.py leaves alone); the
plain Celery reference in the long run."""

from __future__ import annotations

import pytest

from compat_suite.configs import CONFIGS, REFERENCE
from compat_suite.flask_run import run_flask_project

from .projects import SERVERS, assert_on_plain_celery, assert_on_plus, assert_passed

#: The project's tests (tests/test_app.py).
TESTS = 7


@pytest.mark.parametrize("project_store", ["redis", "sqlite", "postgres"])
def test_the_flask_project_passes_its_own_tests_import_swapped(project_store: str) -> None:
    run = run_flask_project(CONFIGS[f"plus-{project_store}"], SERVERS)
    assert_passed(run, TESTS)
    # The swap happened, and only the import lines changed (compat_suite/swap.py checks).
    assert_on_plus(run, project_store, {"flask_app/__init__.py", "flask_app/tasks.py",
                                      "flask_app/views.py", "tests/test_app.py"})


@pytest.mark.long
def test_the_flask_project_passes_its_own_tests_on_plain_celery() -> None:
    run = run_flask_project(REFERENCE, SERVERS)
    assert_passed(run, TESTS)
    assert_on_plain_celery(run)


def test_the_flask_project_is_written_for_plain_celery() -> None:
    """No file of the project names celery_plus: the swap is the only change."""
    from compat_suite.flask_run import FLASK_PROJECT
    from compat_suite.swap import celery_imports

    sources = {p: p.read_text() for p in FLASK_PROJECT.rglob("*.py")}
    assert not [p for p, text in sources.items() if "celery_plus" in text]
    assert sum(bool(celery_imports(text)) for text in sources.values()) >= 4
