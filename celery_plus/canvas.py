"""Re-export of :mod:`celery.canvas` (every name it has, ``__all__`` or not)."""

from typing import Any

import celery.canvas as _celery_canvas
from celery.canvas import *  # noqa: F403
from celery.canvas import __all__ as __all__


def __getattr__(name: str) -> Any:
    return getattr(_celery_canvas, name)
