"""Re-export of :mod:`celery.utils.time` (every name it has, ``__all__`` or not)."""

from typing import Any

import celery.utils.time as _celery_time
from celery.utils.time import *  # noqa: F403
from celery.utils.time import __all__ as __all__


def __getattr__(name: str) -> Any:
    return getattr(_celery_time, name)
