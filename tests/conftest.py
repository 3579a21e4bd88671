"""The test session's own PostgreSQL: a private cluster, so the suite never runs out of the
shared server's connections (``max_connections=100`` there; four pytest-xdist workers, each
with real workers and prefork children holding pool, LISTEN and maintenance sessions, need
more) and never touches its data.

The pytest process that starts the session (xdist's controller, or pytest itself without
``-n``) makes the cluster with ``initdb`` on a free port and exports its URL as
``PLUS_TEST_PG`` before any worker starts or any test module reads it; it stops and removes
the cluster at the end. Set ``PLUS_TEST_PG`` yourself to use another server instead; without
PostgreSQL's server programs (``initdb``) the suite uses ``127.0.0.1:5432/test``.
"""

from __future__ import annotations

import os

import pytest

#: Enough sessions for four xdist workers' deployments at once, with room to spare.
MAX_CONNECTIONS = 600


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput") or os.environ.get("PLUS_TEST_PG"):
        return  # an xdist worker (the controller exported it), or the user's own server
    from tests.faults.servers import PG_BIN, PostgresCluster

    if not (PG_BIN / "initdb").exists():
        return
    cluster = PostgresCluster(max_connections=MAX_CONNECTIONS, prefix="plus-test-pg-")
    cluster.start()
    os.environ["PLUS_TEST_PG"] = cluster.url
    config.stash[_CLUSTER] = cluster


def pytest_unconfigure(config: pytest.Config) -> None:
    cluster = config.stash.get(_CLUSTER, None)
    if cluster is not None:
        cluster.close()
        os.environ.pop("PLUS_TEST_PG", None)


_CLUSTER = pytest.StashKey["object"]()
