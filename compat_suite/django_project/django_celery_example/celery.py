"""The Celery app: settings from Django's (``CELERY_`` namespace), tasks autodiscovered in the
installed apps, a router over three queues, and two signal handlers (``after_setup_logger``
adds a log file, ``task_postrun`` records each run)."""

import logging
import os

from celery import Celery
from celery.signals import after_setup_logger, task_postrun

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "django_celery_example.settings")

app = Celery("django_celery_example")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()

#: The queues a task name's ``<queue>:`` prefix may name; others go to ``default``.
QUEUES = ("default", "high_priority", "low_priority")


def route_task(name, args, kwargs, options, task=None, **kw):
    """``high_priority:polls.tasks.x`` goes to the ``high_priority`` queue, and so on."""
    from django.conf import settings

    queue = name.split(":", 1)[0] if ":" in name else "default"
    if queue not in QUEUES:
        queue = "default"
    return {"queue": f"{settings.CELERY_QUEUE_PREFIX}{queue}"}


@after_setup_logger.connect
def on_after_setup_logger(logger, **kwargs):
    """The worker also logs to ``settings.CELERY_LOG_FILE``."""
    from django.conf import settings

    handler = logging.FileHandler(settings.CELERY_LOG_FILE)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
    logger.addHandler(handler)


@task_postrun.connect
def task_postrun_handler(task_id=None, task=None, state=None, **kwargs):
    """Record each run of a polls task (its id, name and final state)."""
    if not task.name.split(":")[-1].startswith("polls."):
        return
    from polls.models import TaskRun

    TaskRun.objects.create(task_id=task_id, task_name=task.name, state=state or "")
