"""The Celery application of proj, configured from ``proj.settings`` — or, in the Django
deployment (``DJANGO_SETTINGS_MODULE`` set), from Django's settings, as Celery's Django guide
does it."""

import os

from celery import Celery

app = Celery(
    "proj",
    include=[
        "proj.tasks.arithmetic",
        "proj.tasks.retries",
        "proj.tasks.limits",
        "proj.tasks.workflows",
        "proj.tasks.reports",
    ],
)
if os.environ.get("DJANGO_SETTINGS_MODULE"):
    app.config_from_object("django.conf:settings", namespace="CELERY")
    app.autodiscover_tasks()
else:
    app.config_from_object("proj.settings")

# Signal handlers connect on import, in workers and in every process that sends tasks.
from proj import signals  # noqa: E402,F401
