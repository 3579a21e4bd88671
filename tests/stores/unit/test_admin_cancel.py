"""An admin cancel marks the task REVOKED in the app's result backend (brief #5, point 7).

A Celery user who cancels a waiting job expects ``AsyncResult(id).state == "REVOKED"``, as
after ``revoke``. Real parts: a ``plus+redis://`` store on a unique key prefix and Celery's
Redis result backend (database 1; the test's result keys are deleted afterwards); the jobs are
real Celery messages published by ``send_task``. The API, the CLI (click's runner) and the web
dashboard (one job and a bulk cancel) all go through ``Admin.cancel``.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from celery.bin.base import CLIContext
from celery.exceptions import TaskRevokedError
from click.testing import CliRunner

from celery_plus import Celery, admin
from celery_plus.admin.api import CANCEL_REASON
from celery_plus.admin.web import make_app
from celery_plus.cli import plus
from tests.stores.unit.test_admin_web import ADMIN_TOKEN, call

REDIS_URL = "redis://127.0.0.1:6379/0"
RESULTS_URL = "redis://127.0.0.1:6379/1"


@pytest.fixture
def app() -> Iterator[Celery]:
    prefix = f"r{uuid.uuid4().hex[:10]}"
    app = Celery("admin-cancel", broker=f"plus+{REDIS_URL}", backend=RESULTS_URL,
                 set_as_current=False)
    app.conf.plus_key_prefix = prefix
    app.conf.plus_admin_token = ADMIN_TOKEN
    sent: list[str] = []
    app.conf.sent_ids = sent
    yield app
    app.close()
    store = redis.Redis.from_url(REDIS_URL)
    keys = list(store.scan_iter(f"{prefix}:*", count=1000))
    if keys:
        store.delete(*keys)
    store.close()
    results = redis.Redis.from_url(RESULTS_URL)
    if sent:
        results.delete(*(f"celery-task-meta-{i}" for i in sent))
    results.close()


def send(app: Celery, **options: Any) -> str:
    job_id = str(app.send_task("proj.report", args=[1], **options).id)
    app.conf.sent_ids.append(job_id)
    return job_id


def test_cancel_marks_the_task_revoked_in_the_result_backend(app: Celery) -> None:
    waiting, later, untouched = send(app), send(app, countdown=600), send(app)
    assert app.AsyncResult(waiting).state == "PENDING"
    result = admin.cancel(app, waiting)
    assert result.changed and result.state == "canceled"
    assert app.AsyncResult(waiting).state == "REVOKED"
    with pytest.raises(TaskRevokedError, match=CANCEL_REASON):
        app.AsyncResult(waiting).get(timeout=5, propagate=True)
    assert admin.cancel(app, later).previous == "scheduled"
    assert app.AsyncResult(later).state == "REVOKED"
    assert app.AsyncResult(untouched).state == "PENDING"


def test_a_cancel_that_changes_nothing_leaves_the_result_alone(app: Celery) -> None:
    job_id = send(app)
    with admin.connect(app) as a:
        [claim] = a.store.backend.claim(["celery"], "w1", 1).claims  # type: ignore[attr-defined]
        assert claim.job_id == job_id
        result = a.cancel(job_id)  # running: not canceled ...
    assert (result.changed, result.state) == (False, "running")
    assert app.AsyncResult(job_id).state == "PENDING"  # ... and not marked REVOKED


def test_cancel_from_the_cli_and_the_dashboard_marks_revoked(app: Celery) -> None:
    by_cli, by_page, bulk_a, bulk_b = send(app), send(app), send(app), send(app)
    done = CliRunner().invoke(plus, ["cancel", by_cli], obj=CLIContext(
        app=app, no_color=True, workdir=None, quiet=True))
    assert done.exit_code == 0, done.output
    assert app.AsyncResult(by_cli).state == "REVOKED"
    web = make_app(app)
    try:
        status, _, _ = call(web, f"/job/{by_page}/cancel", "POST", {})
        assert status == "303 See Other" and app.AsyncResult(by_page).state == "REVOKED"
        form = [("do", "cancel:selected"), ("id", bulk_a),
                ("id", bulk_b), ("confirm", "1")]
        assert call(web, "/jobs/enqueued/bulk", "POST", form)[0] == "303 See Other"
    finally:
        web.close()
    assert [app.AsyncResult(i).state for i in (bulk_a, bulk_b)] == ["REVOKED", "REVOKED"]


def test_an_app_without_a_result_backend_cancels_all_the_same(app: Celery) -> None:
    plain = Celery("no-results", broker=f"plus+{REDIS_URL}", set_as_current=False)
    plain.conf.plus_key_prefix = app.conf.plus_key_prefix
    try:
        job_id = str(plain.send_task("proj.report").id)
        assert admin.cancel(plain, job_id).changed
    finally:
        plain.close()
