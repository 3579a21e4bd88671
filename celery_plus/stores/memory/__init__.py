"""The in-process store: the reference model of the durable store, built from
:mod:`celery_plus.model.rules` (``state`` the data, ``step`` the job operations, ``maintenance`` the
maintenance pass, ``rates`` the rate limits, ``messaging`` the rest of the ``Backend``
interface, ``admin`` the admin store).

``MemoryBackend(clock=...)`` opens a new store; ``MemoryBackend(backend.store, ...)`` another
backend (another worker) on the same one.
"""

from celery_plus.stores.memory import admin  # noqa: F401  (registers the admin store)
from celery_plus.stores.memory.backend import MemoryBackend
from celery_plus.stores.memory.state import MemoryState

__all__ = ["MemoryBackend", "MemoryState"]
