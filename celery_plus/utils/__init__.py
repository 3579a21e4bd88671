"""Re-export of :mod:`celery.utils`."""

from celery.utils import *  # noqa: F403
from celery.utils import __all__ as __all__
