"""Fixtures of the conformance suite: every test runs once per backend, each on its own store.

``backend`` is the test's store on the backend of the current parameter: here ``memory`` and
``sqlite`` (the fast tier: no server, no subprocess); ``tests/stores/conformance`` runs the
same modules on ``postgres``, ``redis``, ``redis-eval`` and ``redis-cluster``
(:data:`tests.fast.conformance.stores.OPENERS`). ``make_backend(**options)`` opens more
backends on that same store (another lease, retention or maintenance interval), as several
workers would. A backend is done when the whole suite passes on it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from celery_plus.model.store import Backend
from tests.inspectors import Inspector, inspector_for

from .stores import backends_on_one_store

#: The stores of the fast tier: no server, no subprocess (the server stores run the same
#: modules in ``tests/stores/conformance``).
FAST_STORES = ("memory", "sqlite")


@pytest.fixture(params=FAST_STORES)
def backend_kind(request: pytest.FixtureRequest) -> str:
    """The backend under test: ``memory`` (the in-process reference model) or ``sqlite``."""
    return str(request.param)


@pytest.fixture
def make_backend(backend_kind: str, tmp_path: Path,
                 request: pytest.FixtureRequest) -> Iterator[Callable[..., Backend]]:
    """Open another backend on the test's store, e.g. ``make_backend(lease_ms=150)``."""
    if backend_kind == "redis-cluster":
        request.getfixturevalue("redis_cluster")
    with backends_on_one_store(backend_kind, tmp_path) as make:
        yield make


@pytest.fixture
def backend(make_backend: Callable[..., Backend]) -> Backend:
    """The test's backend: 30 s leases, maintenance not throttled."""
    return make_backend()


@pytest.fixture
def inspect(backend: Backend) -> Inspector:
    """The test store's inspector (``tests/inspectors``): its record fields, holds, slots and
    deadlines as the backend's own keys or tables keep them."""
    return inspector_for(backend)
