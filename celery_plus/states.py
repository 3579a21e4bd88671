"""Re-export of :mod:`celery.states`."""

from celery.states import *  # noqa: F403
from celery.states import __all__ as __all__
