"""Fixtures of the conformance suite: every test runs once per backend, each on its own store.

``backend`` is the test's store on the backend of the current parameter (test ids
``memory``, ``postgres``, ``redis``, ``redis-eval`` and ``sqlite``, from
:data:`tests.conformance.stores.OPENERS`); ``make_backend(**options)``
opens more backends on that same store (another lease, retention or maintenance interval), as
several workers would. A backend is done when the whole suite passes on it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from celery_plus.transport.backend import Backend

from .stores import OPENERS, backends_on_one_store


@pytest.fixture(params=sorted(OPENERS))
def backend_kind(request: pytest.FixtureRequest) -> str:
    """The backend under test: ``memory`` (the in-process reference model), ``postgres``,
    ``redis``, ``redis-eval`` (Redis with EVALSHA instead of Redis Functions) or ``sqlite``."""
    return str(request.param)


@pytest.fixture
def make_backend(backend_kind: str, tmp_path: Path) -> Iterator[Callable[..., Backend]]:
    """Open another backend on the test's store, e.g. ``make_backend(lease_ms=150)``."""
    with backends_on_one_store(backend_kind, tmp_path) as make:
        yield make


@pytest.fixture
def backend(make_backend: Callable[..., Backend]) -> Backend:
    """The test's backend: 30 s leases, maintenance not throttled."""
    return make_backend()
