"""Tests against the running worker: each publishes, then waits for what the worker wrote in
the shared database (django-celery-results' table, the app's models) or its log file."""

import json
from pathlib import Path

import pytest
from celery.result import AsyncResult
from django.urls import reverse

from polls import tasks
from polls.models import Member, Note, TaskRun

from .conftest import wait_for, wait_for_result

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_result_lands_in_django_celery_results_table():
    sent = tasks.add.delay(2, 3)
    row = wait_for_result(sent.id)
    assert (row.status, json.loads(row.result), row.task_name) == ("SUCCESS", 5, "polls.tasks.add")
    # result_extended: the arguments and the worker are stored too.
    assert json.loads(row.task_args) == "(2, 3)" and row.worker
    assert AsyncResult(sent.id).get(timeout=10) == 5


def test_a_failure_is_stored_with_its_traceback():
    row = wait_for_result(tasks.divide.delay(1, 0).id)
    assert row.status == "FAILURE"
    assert json.loads(row.result)["exc_type"] == "ZeroDivisionError"
    assert "ZeroDivisionError" in row.traceback


def test_each_route_reaches_its_queue(settings):
    prefix = settings.CELERY_QUEUE_PREFIX
    sent = {"high_priority": tasks.urgent.delay(), "low_priority": tasks.bulk.delay(),
            "default": tasks.where_am_i.delay()}
    for queue, result in sent.items():
        assert json.loads(wait_for_result(result.id).result) == f"{prefix}{queue}"


def test_the_base_task_is_retried_with_backoff_until_it_succeeds():
    member = Member.objects.create(username="ada")
    row = wait_for_result(tasks.flaky_sync.delay(member.pk, failures=1).id)
    assert (row.status, json.loads(row.result)) == ("SUCCESS", {"attempts": 2, "retries": 1})
    # retry_backoff=True, no jitter: the retry ran 1 s after the failure. The row is written
    # after the retry's ETA is set, later still on a loaded machine (0.77 s was seen): half a
    # second tells the backoff from an immediate retry (milliseconds).
    assert (row.date_done - row.date_created).total_seconds() >= 0.5


def test_the_decorator_class_task_leaves_one_note_after_a_retry():
    member = Member.objects.create(username="grace")
    row = wait_for_result(tasks.add_note.delay(member.pk, "hi", failures=1).id)
    assert (row.status, json.loads(row.result)) == ("SUCCESS", 1)
    assert Note.objects.filter(member=member).count() == 1


def test_the_task_postrun_handler_records_each_run():
    sent = tasks.add.delay(1, 1)
    run = wait_for(lambda: TaskRun.objects.filter(task_id=sent.id).first())
    assert (run.task_name, run.state) == ("polls.tasks.add", "SUCCESS")


def test_the_after_setup_logger_handler_writes_the_log_file(settings):
    sent = tasks.add.delay(40, 2)
    wait_for_result(sent.id)
    log = Path(settings.CELERY_LOG_FILE)
    assert wait_for(lambda: log.exists() and "adding 40 and 2" in log.read_text())


def test_the_view_enqueues_and_task_status_reads_the_result(client):
    response = client.post(reverse("start_add"), {"x": "20", "y": "22"})
    task_id = response.json()["task_id"]
    wait_for_result(task_id)
    status = client.get(reverse("task_status"), {"task_id": task_id}).json()
    assert status == {"state": "SUCCESS", "result": 42}
    assert client.post(reverse("start_add"), {"x": "two"}).status_code == 400
