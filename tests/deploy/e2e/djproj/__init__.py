"""A Django project as Django users write one, with its Celery app (``djproj.celery``).

Loaded by real workers as ``-A tests.deploy.e2e.djproj`` with
``DJANGO_SETTINGS_MODULE=tests.deploy.e2e.djproj.settings``; ``client.py`` is the web side.
"""

from .celery import app as celery_app

__all__ = ("celery_app",)
