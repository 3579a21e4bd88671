"""django-celery-results with a celery-plus app (docs/addons.md): :mod:`tests.deploy.e2e.proj`'s
tasks, their results stored by django-celery-results (``result_backend="django-db"``) in a
Django project whose only app is ``django_celery_results``, its database a SQLite file
(``PLUS_TEST_DCR_DB``). ``python -m tests.deploy.e2e.dcr_proj migrate`` creates the tables.
"""

from __future__ import annotations

import os
import sys

import django
from django.conf import settings

if not settings.configured:
    settings.configure(
        INSTALLED_APPS=["django_celery_results"],
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3",
                               "NAME": os.environ["PLUS_TEST_DCR_DB"]}},
        USE_TZ=True,
        DEFAULT_AUTO_FIELD="django.db.models.AutoField",
    )
    django.setup()

from tests.deploy.e2e.proj import make_app

# result_extended: the task name (and arguments) in the row, as django-celery-results documents.
app = make_app(os.environ.get("PLUS_TEST_PREFIX", "plus-e2e"), result_backend="django-db",
               result_extended=True)

if __name__ == "__main__" and sys.argv[1] == "migrate":
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
