"""Django settings of the test project: SQLite database at ``$DJPROJ_DB``, broker from
``PLUS_TEST_BROKER``, Celery settings under the ``CELERY_`` namespace."""

import os

from tests.deploy.e2e import proj

SECRET_KEY = "test-only"
DEBUG = False
USE_TZ = True
INSTALLED_APPS = ["django.contrib.contenttypes", "tests.deploy.e2e.djproj.notes"]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3",
                         "NAME": os.environ.get("DJPROJ_DB", "/tmp/djproj.sqlite3"),
                         "OPTIONS": {"timeout": 30}}}
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"

PREFIX = os.environ.get("PLUS_TEST_PREFIX", "djproj")
CELERY_BROKER_URL = os.environ.get("PLUS_TEST_BROKER", f"plus+{proj.REDIS_URL}")
CELERY_RESULT_BACKEND = proj.RESULT_URL
CELERY_PLUS_KEY_PREFIX = PREFIX
CELERY_PLUS_PG_SCHEMA = proj.pg_schema(PREFIX)
CELERY_PLUS_POLL_INTERVAL = 0.5
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
