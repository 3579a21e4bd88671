"""Django settings, with Celery's under the ``CELERY_`` namespace.

Deployment-specific values come from the environment: ``DJANGO_DB_PATH`` (the SQLite file),
``CELERY_LOG_FILE`` (the worker's log file, ``after_setup_logger``), ``CELERY_QUEUE_PREFIX``
(prefixes the three queue names), and any ``DJANGO_CELERY_<NAME>`` variable sets
``CELERY_<NAME>`` (its value JSON-decoded when it is JSON), as a twelve-factor deployment would.
"""

import contextlib
import json
import os
from pathlib import Path

from celery.schedules import crontab

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = "django-insecure-course-project"
DEBUG = False
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "testserver"]
USE_TZ = True
TIME_ZONE = "UTC"

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django_celery_beat",
    "django_celery_results",
    "polls",
]
ROOT_URLCONF = "django_celery_example.urls"
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("DJANGO_DB_PATH", str(BASE_DIR / "db.sqlite3")),
        "OPTIONS": {"timeout": 30},
    }
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

CELERY_QUEUE_PREFIX = os.environ.get("CELERY_QUEUE_PREFIX", "")
CELERY_LOG_FILE = os.environ.get("CELERY_LOG_FILE", str(BASE_DIR / "celery.log"))

CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL", "redis://127.0.0.1:6379/0")
CELERY_RESULT_BACKEND = "django-db"
CELERY_RESULT_EXTENDED = True
CELERY_TASK_DEFAULT_QUEUE = f"{CELERY_QUEUE_PREFIX}default"
CELERY_TASK_ROUTES = ("django_celery_example.celery.route_task",)
CELERY_BEAT_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
CELERY_BEAT_SCHEDULE = {
    "nightly-cleanup": {
        "task": "polls.tasks.cleanup",
        "schedule": crontab(minute=0, hour=3),
    },
}
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

for _name, _value in os.environ.items():
    if _name.startswith("DJANGO_CELERY_"):
        with contextlib.suppress(ValueError):
            _value = json.loads(_value)
        globals()[_name.removeprefix("DJANGO_")] = _value
