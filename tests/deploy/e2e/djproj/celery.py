"""The project's Celery app, the way Celery's Django guide writes it (imports swapped)."""

import os

from celery_plus import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.deploy.e2e.djproj.settings")

app = Celery("djproj")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
