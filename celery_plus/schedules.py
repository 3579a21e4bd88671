"""Re-export of :mod:`celery.schedules`."""

from celery.schedules import *  # noqa: F403
from celery.schedules import __all__ as __all__
