"""The app's tasks, found by ``app.autodiscover_tasks()``."""

import logging

from celery import current_task, shared_task

from .base_task import BaseTaskWithRetry, custom_celery_task
from .models import Member, Note

logger = logging.getLogger(__name__)


@shared_task
def add(x, y):
    logger.info("adding %s and %s", x, y)
    return x + y


@shared_task
def divide(x, y):
    return x / y


@shared_task(name="high_priority:polls.tasks.urgent", bind=True)
def urgent(self):
    return self.request.delivery_info["routing_key"]


@shared_task(name="low_priority:polls.tasks.bulk", bind=True)
def bulk(self):
    return self.request.delivery_info["routing_key"]


@shared_task(bind=True)
def where_am_i(self):
    return self.request.delivery_info["routing_key"]


@shared_task(bind=True, base=BaseTaskWithRetry)
def flaky_sync(self, member_id, failures):
    """Fails the first ``failures`` times it works on the member (retried with back-off)."""
    member = Member.objects.get(pk=member_id)
    member.attempts += 1
    member.save(update_fields=["attempts"])
    if member.attempts <= failures:
        raise ConnectionError(f"attempt {member.attempts} failed")
    return {"attempts": member.attempts, "retries": self.request.retries}


@custom_celery_task(max_retries=3)
def add_note(member_id, text, failures):
    """Writes a note, then fails the first ``failures`` tries: the transaction is rolled back
    each time, so one note is left."""
    Note.objects.create(member_id=member_id, text=text)
    if current_task.request.retries < failures:
        raise ValueError(f"try {current_task.request.retries} failed")
    return Note.objects.filter(member_id=member_id).count()


@shared_task
def cleanup():
    """The nightly periodic task (``CELERY_BEAT_SCHEDULE``, kept by django-celery-beat)."""
    return Note.objects.filter(text="").delete()[0]
