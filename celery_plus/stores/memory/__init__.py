"""The in-process store: the reference model of the durable store, built from
:mod:`celery_plus.rules` (``state`` the data, ``step`` the job operations, ``maintenance`` the
maintenance pass, ``rates`` the rate limits, ``messaging`` the rest of the ``Backend``
interface, ``admin`` the admin store).

``MemoryBackend(clock=...)`` opens a new store; ``MemoryBackend(backend.store, ...)`` another
backend (another worker) on the same one.
"""

from . import admin  # noqa: F401  (registers the admin store)
from .backend import MemoryBackend
from .state import MemoryState

__all__ = ["MemoryBackend", "MemoryState"]
