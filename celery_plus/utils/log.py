"""Re-export of :mod:`celery.utils.log`."""

from celery.utils.log import *  # noqa: F403
from celery.utils.log import __all__ as __all__
