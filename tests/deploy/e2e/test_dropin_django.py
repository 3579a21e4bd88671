"""Defect 5 of issue 12: Django's ``delay_on_commit`` / ``apply_async_on_commit``.

A real Django project (``tests/deploy/e2e/djproj``: settings, an app with a model and a
``@shared_task``, the Celery app from Celery's Django guide with imports swapped) on a SQLite
database, a real ``celery-plus worker`` on each store. The task is Celery's ``DjangoTask``
and celery-plus's ``Task`` at once: publishes wait for the commit (none after a rollback),
the unique key coalesces the two on-commit publishes, and the worker sees the committed row.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from .conftest import ROOT, Worker, wait_until
from .proj import events

APP = "tests.deploy.e2e.djproj"


@pytest.fixture
def django_env(tmp_path: Path, prefix: str, broker_url: str) -> dict[str, str]:
    return {"DJANGO_SETTINGS_MODULE": "tests.deploy.e2e.djproj.settings",
            "DJPROJ_DB": str(tmp_path / "django.sqlite3"), "PLUS_TEST_PREFIX": prefix,
            "PLUS_TEST_BROKER": broker_url}


def _client(env: dict[str, str], *args: str) -> Any:
    proc = subprocess.run([sys.executable, "-m", "tests.deploy.e2e.djproj.client", *args],
                          cwd=ROOT, env={**os.environ, **env}, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_delay_on_commit_publishes_after_the_commit_and_the_worker_sees_the_row(
        start_worker: Callable[..., Worker], django_env: dict[str, str], prefix: str) -> None:
    observed = _client(django_env, "on_commit")
    assert "celery.contrib.django.task.DjangoTask" in observed["task_mro"]
    assert "celery_plus.task.Task" in observed["task_mro"]
    assert observed["queued_inside"] == 0, "published before the transaction committed"
    assert observed["queued_after_commit"] == 1, "on-commit publishes of one key coalesce"
    assert observed["queued_after_rollback"] == 1, "a rolled-back transaction published"

    start_worker(app=APP, env=django_env)
    wait_until(lambda: events(prefix, "seen"), timeout=60, message="the task ran")
    assert [e["text"] for e in events(prefix, "seen")] == ["committed"]
    assert _client(django_env, "seen", str(observed["note_id"])) == {"seen": True}
