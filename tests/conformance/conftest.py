"""Fixtures of the conformance suite: every test runs once per backend, each on its own store.

``backend`` is the test's store on the backend of the current parameter (test ids
``memory``, ``postgres``, ``redis``, ``redis-eval``, ``redis-cluster`` and ``sqlite``, from
:data:`tests.conformance.stores.OPENERS`); ``make_backend(**options)``
opens more backends on that same store (another lease, retention or maintenance interval), as
several workers would. A backend is done when the whole suite passes on it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from celery_plus.model.store import Backend
from tests.inspectors import Inspector, inspector_for
from tests.redis_cluster import CLUSTER_GROUP

from .stores import OPENERS, backends_on_one_store

#: Run the ``redis-cluster`` variant of every queue-scoped test, not only the smoke's few.
FULL_CLUSTER_RUN = os.environ.get("PLUS_REDIS_CLUSTER_FULL") == "1"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "cluster_smoke: one of the few conformance tests the default run makes "
        "on the Redis Cluster (all queue-scoped ones with PLUS_REDIS_CLUSTER_FULL=1)")
    config.addinivalue_line(
        "markers", "not_queue_scoped(reason): a conformance test whose guarantee spans "
        "queues or the standalone key layout, so not the Redis Cluster's (docs/redis-cluster.md)")


@pytest.hookimpl(tryfirst=True)  # before xdist reads the xdist_group marks
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep the ``redis-cluster`` variant of the queue-scoped tests only: of the
    ``cluster_smoke`` ones by default, of all with ``PLUS_REDIS_CLUSTER_FULL=1``; and run them
    on one xdist worker (``CLUSTER_GROUP``), which starts the one local cluster they share."""
    keep, drop = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        on_cluster = callspec is not None and callspec.params.get("backend_kind") == "redis-cluster"
        wanted = item.get_closest_marker("not_queue_scoped") is None and (
            FULL_CLUSTER_RUN or item.get_closest_marker("cluster_smoke") is not None)
        if on_cluster and wanted:
            item.add_marker(CLUSTER_GROUP)
        (drop if on_cluster and not wanted else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(params=sorted(OPENERS))
def backend_kind(request: pytest.FixtureRequest) -> str:
    """The backend under test: ``memory`` (the in-process reference model), ``postgres``,
    ``redis``, ``redis-eval`` (Redis with EVALSHA instead of Redis Functions) or ``sqlite``."""
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
