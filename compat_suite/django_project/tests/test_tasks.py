"""Unit tests of the tasks and the Celery configuration, eagerly in this process."""

import pytest
from celery import Celery
from celery.exceptions import Retry
from django_celery_beat.models import PeriodicTask
from django_celery_beat.schedulers import DatabaseScheduler

from django_celery_example.celery import app as celery_app
from polls import tasks
from polls.models import Member, Note


def test_the_celery_settings_come_from_djangos_celery_namespace(settings):
    assert isinstance(celery_app, Celery)
    assert celery_app.conf.result_backend == "django-db"
    assert celery_app.conf.result_extended is True
    assert celery_app.conf.beat_scheduler == settings.CELERY_BEAT_SCHEDULER
    assert celery_app.conf.task_default_queue == f"{settings.CELERY_QUEUE_PREFIX}default"
    assert celery_app.conf.broker_url == settings.CELERY_BROKER_URL


def test_autodiscover_finds_the_apps_tasks():
    celery_app.loader.import_default_modules()
    assert {"polls.tasks.add", "polls.tasks.flaky_sync", "polls.tasks.add_note",
            "high_priority:polls.tasks.urgent", "low_priority:polls.tasks.bulk"} <= set(
        celery_app.tasks)
    assert tasks.add.app is celery_app


def test_the_router_sends_each_task_to_its_queue(settings):
    prefix = settings.CELERY_QUEUE_PREFIX
    route = celery_app.amqp.router.route
    assert route({}, tasks.urgent.name)["queue"].name == f"{prefix}high_priority"
    assert route({}, tasks.bulk.name)["queue"].name == f"{prefix}low_priority"
    assert route({}, tasks.add.name)["queue"].name == f"{prefix}default"


@pytest.mark.django_db
def test_add_runs_eagerly(eager):
    assert tasks.add.delay(2, 3).get() == 5
    assert tasks.add.apply(args=(4, 4)).get() == 8


@pytest.mark.django_db
def test_the_base_task_retries_with_backoff(eager):
    member = Member.objects.create(username="ada")
    with pytest.raises(Retry) as retry:
        tasks.flaky_sync.delay(member.pk, failures=1)
    assert retry.value.when == 1  # retry_backoff=True, no jitter: 1 s, then 2, 4...
    assert isinstance(retry.value.exc, ConnectionError)
    assert tasks.flaky_sync.delay(member.pk, failures=1).get() == {"attempts": 2, "retries": 0}


@pytest.mark.django_db
def test_the_decorator_class_task_rolls_back_a_failed_try(eager):
    member = Member.objects.create(username="grace")
    with pytest.raises(Retry):
        tasks.add_note.delay(member.pk, "lost", failures=1)
    assert not Note.objects.exists()
    assert tasks.add_note.delay(member.pk, "hello", failures=0).get() == 1
    assert list(Note.objects.values_list("text", flat=True)) == ["hello"]


@pytest.mark.django_db(transaction=True)  # the scheduler closes old connections
def test_the_beat_schedule_is_kept_in_django_celery_beats_tables():
    DatabaseScheduler(app=celery_app, lazy=False)
    entry = PeriodicTask.objects.get(name="nightly-cleanup")
    assert entry.task == "polls.tasks.cleanup"
    assert (entry.crontab.minute, entry.crontab.hour) == ("0", "3")
    assert entry.enabled
