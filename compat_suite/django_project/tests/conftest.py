"""Fixtures: the Django database of the settings, migrated here and shared with the running
worker (so tests that use the worker see its writes), and helpers to wait for the worker."""

import time

import pytest
from django.core.management import call_command

from django_celery_example.celery import app as celery_app


@pytest.fixture(scope="session")
def django_db_setup(django_db_blocker):
    """Migrate the settings' database, the one the worker writes too, instead of a test
    database (pytest-django's "Using an existing, external database for tests")."""
    with django_db_blocker.unblock():
        call_command("migrate", verbosity=0)


@pytest.fixture
def eager(settings):
    """Tasks run in the calling process, errors raised (for unit tests of the tasks)."""
    celery_app.conf.task_always_eager = True
    celery_app.conf.task_eager_propagates = True
    yield celery_app
    celery_app.conf.task_always_eager = False
    celery_app.conf.task_eager_propagates = False


def wait_for(predicate, timeout=60.0, interval=0.05):
    """``predicate()``'s first truthy value, polled until ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"nothing after {timeout}s")
        time.sleep(interval)


def wait_for_result(task_id, timeout=60.0):
    """django-celery-results' row of ``task_id`` once the task is done."""
    from django_celery_results.models import TaskResult

    return wait_for(lambda: TaskResult.objects.filter(
        task_id=task_id, status__in=("SUCCESS", "FAILURE")).first(), timeout)
