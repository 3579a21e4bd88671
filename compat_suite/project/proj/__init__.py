"""proj: the Celery project the compatibility suite runs (Celery's recommended layout).

``celery -A proj worker`` finds the app in ``proj/celery.py``.
"""

from .celery import app as celery_app

__all__ = ("celery_app",)
