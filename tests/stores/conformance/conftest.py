"""The conformance suite on the server stores: the modules of ``tests/fast/conformance``, each
run here on ``postgres``, ``redis``, ``redis-eval`` (Redis with EVALSHA instead of Redis
Functions) and ``redis-cluster`` (a few smoke cases by default, every queue-scoped one with
``PLUS_REDIS_CLUSTER_FULL=1``). The fixtures are the fast tier's; only the stores differ.
"""

from __future__ import annotations

import os

import pytest

from tests.fast.conformance.conftest import backend, inspect, make_backend  # noqa: F401
from tests.redis_cluster import CLUSTER_GROUP

#: The server stores (``tests.fast.conformance.stores.OPENERS``).
SERVER_STORES = ("postgres", "redis", "redis-cluster", "redis-eval")
#: Run the ``redis-cluster`` variant of every queue-scoped test, not only the smoke's few.
FULL_CLUSTER_RUN = os.environ.get("PLUS_REDIS_CLUSTER_FULL") == "1"


@pytest.fixture(params=SERVER_STORES)
def backend_kind(request: pytest.FixtureRequest) -> str:
    """The backend under test: ``postgres``, ``redis``, ``redis-eval`` or ``redis-cluster``."""
    return str(request.param)


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


