"""Read-outs of a store for the tests, each reading its own store's keys or tables directly.

The stores answer the transport, the admin and the tools through their interfaces
(``celery_plus/model/store.py``); what only tests look at (a job's raw record, unique holds,
slots, lease and hold deadlines, the ids in a state) and the one write only tests make
(:meth:`Inspector.force_state`) are here, one inspector per store. ``inspector_for(backend)``
picks the backend's; the conformance suite's ``inspect`` fixture is the test backend's.
"""

from __future__ import annotations

from typing import Any

from tests.inspectors.base import Inspector

__all__ = ["Inspector", "inspector_for"]


def inspector_for(backend: Any) -> Inspector:
    """The inspector of ``backend``'s store (by the backend's class)."""
    kind = type(backend).__name__
    if kind == "RedisClusterBackend":
        from tests.inspectors.cluster import ClusterInspector

        return ClusterInspector(backend)
    if kind == "RedisBackend":
        from tests.inspectors.redis import RedisInspector

        return RedisInspector(backend)
    if kind == "PostgresBackend":
        from tests.inspectors.postgres import PostgresInspector

        return PostgresInspector(backend)
    if kind == "SQLiteBackend":
        from tests.inspectors.sqlite import SQLiteInspector

        return SQLiteInspector(backend)
    if kind == "MemoryBackend":
        from tests.inspectors.memory import MemoryInspector

        return MemoryInspector(backend)
    raise TypeError(f"no inspector for a {kind}")
