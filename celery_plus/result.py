"""Re-export of :mod:`celery.result` (``AsyncResult`` gains ``.deduplicated`` on publish)."""

from celery.result import *  # noqa: F403
from celery.result import __all__ as __all__
