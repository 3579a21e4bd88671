"""django-celery-beat's ``DatabaseScheduler`` under ``celery-plus beat`` (issue #30 point 2;
docs/schedules.md, "Other schedulers"): :mod:`tests.deploy.e2e.periodic_proj`'s app in a Django
project whose only app is ``django_celery_beat``, its database a SQLite file
(``PLUS_TEST_DCB_DB``).

``python -m tests.deploy.e2e.dcb_proj migrate`` creates the tables;
``python -m tests.deploy.e2e.dcb_proj add NAME TASK SECONDS`` adds an interval entry, as an
admin does in Django's admin (the running beats re-read their entries: no restart).
"""

from __future__ import annotations

import os
import sys

import django
from django.conf import settings

if not settings.configured:
    settings.configure(
        INSTALLED_APPS=["django_celery_beat"],
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3",
                               "NAME": os.environ["PLUS_TEST_DCB_DB"],
                               "OPTIONS": {"timeout": 30}}},
        USE_TZ=True,
        TIME_ZONE="UTC",
        DEFAULT_AUTO_FIELD="django.db.models.AutoField",
    )
    django.setup()

from tests.deploy.e2e.periodic_proj import app

__all__ = ["app"]


def add(name: str, task: str, seconds: float) -> None:
    from django_celery_beat.models import IntervalSchedule, PeriodicTask

    # Two beats starting at once may each have written the same interval (django-celery-beat
    # syncs beat_schedule into its tables without a lock): any one of them will do.
    same = {"every": int(seconds), "period": IntervalSchedule.SECONDS}
    every = (IntervalSchedule.objects.filter(**same).first()
             or IntervalSchedule.objects.create(**same))
    PeriodicTask.objects.create(name=name, task=task, interval=every)


if __name__ == "__main__":
    if sys.argv[1] == "migrate":
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
    elif sys.argv[1] == "add":
        add(sys.argv[2], sys.argv[3], float(sys.argv[4]))
