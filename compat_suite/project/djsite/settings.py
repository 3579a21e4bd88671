"""Django settings of the Django deployment: proj's Celery settings, spelt the Django way
(``CELERY_BROKER_URL``…, read with ``config_from_object("django.conf:settings",
namespace="CELERY")``), and a SQLite database at ``$PROJ_DJANGO_DB``."""

import os

from proj import settings as proj_settings

SECRET_KEY = "compat-suite"
USE_TZ = True
INSTALLED_APPS = ["django.contrib.contenttypes", "djsite.notes"]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3",
                         "NAME": os.environ.get("PROJ_DJANGO_DB", "django.sqlite3"),
                         "OPTIONS": {"timeout": 30}}}
DEFAULT_AUTO_FIELD = "django.db.models.AutoField"

# Every Celery (and celery-plus) setting of proj, as CELERY_<NAME>.
globals().update({f"CELERY_{name.upper()}": value for name, value in vars(proj_settings).items()
                  if name.islower() and not name.startswith("_") and name != "os"})
