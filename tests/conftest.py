"""The test session's own PostgreSQL: a private cluster, so the suite never runs out of the
shared server's connections (``max_connections=100`` there; six pytest-xdist workers, each
with real workers and prefork children holding pool, LISTEN and maintenance sessions, need
more) and never touches its data.

The pytest process that starts the session (xdist's controller, or pytest itself without
``-n``) *reserves* the cluster when it loads this file: it picks a free port and exports the
URL the cluster will have (database ``test``, as on the shared server) as ``PLUS_TEST_PG``,
before any other conftest or test module reads it (pytest loads the conftests of the paths
it is given before ``pytest_configure``) and before any xdist worker starts. It *starts* the
cluster (``initdb``, ``pg_ctl start``) only once the collected tests are known and one of
them may reach PostgreSQL (:func:`needs_postgres`): without xdist after collection
(``pytest_collection_modifyitems``), under xdist when a worker reports its collection
(``pytest_xdist_node_collection_finished``, which the controller handles before it hands
out any test). So a session of server-free tests only (``tests/fast/channel`` on its default
stores) starts no server and runs without a network (``unshare -n``). The cluster is stopped
and removed at the end (at exit, if the session ends before it is configured). Set
``PLUS_TEST_PG`` yourself to use another server instead; without PostgreSQL's server
programs (``initdb``) the suite uses ``127.0.0.1:5432/test``.
"""

from __future__ import annotations

import atexit
import compileall
import json
import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.deploy import matrix

#: Enough sessions for six xdist workers' deployments at once, with room to spare.
MAX_CONNECTIONS = 900


def needs_postgres(nodeid: str) -> bool:
    """Whether the test ``nodeid`` may reach the session's PostgreSQL: never a test of
    ``tests/fast`` (no server), but for the channel suite's ``postgres`` store when
    ``PLUS_CHANNEL_STORES`` names it (its test ids say so)."""
    if nodeid.startswith("tests/fast/"):
        return "postgres" in nodeid and nodeid.startswith("tests/fast/channel/")
    return True


def _reserve_private_cluster() -> int | None:
    """The port of the private cluster this session may start (its URL exported), or None:
    an xdist worker (the controller exported it), the user's own server, no ``initdb``."""
    if os.environ.get("PYTEST_XDIST_WORKER") or os.environ.get("PLUS_TEST_PG"):
        return None
    from tests.deploy.faults.servers import PG_BIN, free_port

    if not (PG_BIN / "initdb").exists():
        return None
    port = free_port()
    os.environ["PLUS_TEST_PG"] = f"postgresql://postgres@127.0.0.1:{port}/test"
    return port


def _start_private_cluster(nodeids: Iterable[str]) -> None:
    """Start the reserved cluster (once) if one of ``nodeids`` may reach PostgreSQL."""
    global _cluster
    if _port is None or _cluster is not None or not any(map(needs_postgres, nodeids)):
        return
    from tests.deploy.faults.servers import PostgresCluster

    cluster = PostgresCluster(max_connections=MAX_CONNECTIONS, prefix="plus-test-pg-",
                              port=_port)
    _cluster = cluster  # removed at exit even if what follows fails
    cluster.start()
    # Database "test", as on the shared server: tests reach "postgres" as another database.
    assert cluster.create_database("test") == os.environ["PLUS_TEST_PG"]


def _stop_private_cluster() -> None:
    global _cluster
    if _cluster is not None:
        _cluster.close()
        _cluster = None
    if _port is not None:
        os.environ.pop("PLUS_TEST_PG", None)


def _cache_bytecode() -> None:
    """Let this session and every process it starts keep compiled modules (``__pycache__``).

    The CI machine's image sets ``PYTHONDONTWRITEBYTECODE``, so each of the suite's hundreds of
    ``celery-plus worker``, CLI and publisher processes compiled ``celery_plus`` and the test
    apps from source again: 0.2 s of CPU per process, a third of the CPU of an end-to-end module
    (docs/tests.md). The session's first process compiles them once, before any xdist worker
    starts; the ``.gitignore`` keeps ``__pycache__`` out of the history."""
    sys.dont_write_bytecode = False
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    root = Path(__file__).resolve().parent.parent
    for folder in ("celery_plus", "tests", "compat_suite"):
        compileall.compile_dir(root / folder, quiet=1, workers=0)


_cache_bytecode()
_port = _reserve_private_cluster()
_cluster: Any = None
#: Also when the session ends before ``pytest_configure`` (a usage error), which calls no
#: ``pytest_unconfigure``: the cluster used to be left running.
atexit.register(_stop_private_cluster)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: Any, ids: Sequence[str]) -> None:
    """Under xdist: the controller starts the cluster before it hands out any test."""
    _start_private_cluster(ids)


#: Modules whose tests run longest (a run of minutes, or a group one xdist worker runs in
#: turn), collected first so that xdist starts them first instead of ending the session on them.
LONG_FIRST = ("tests/deploy/compat/test_upstream_slice.py",
              "tests/deploy/compat/test_compat_dimensions.py",
              "tests/deploy/compat/test_compat_suite.py", "tests/deploy/browser/",
              "tests/stores/model/", "tests/fast/model/")
#: Collected last: the fast tier's many short tests (its model aside) fill the xdist workers'
#: ends, after the server tier, whose tests of processes racing on PostgreSQL take tens of
#: seconds each and, collected after ``tests/fast``, used to end the session.
SHORT_LAST = "tests/fast/"


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    matrix.select(config, items)  # the variants and long tests the README's suite leaves out
    _start_private_cluster(item.nodeid for item in items)  # without xdist (a no-op in workers)

    def rank(item: pytest.Item) -> int:
        path = item.nodeid.split("::")[0]
        return next((i for i, long in enumerate(LONG_FIRST) if path.startswith(long)),
                    len(LONG_FIRST) + path.startswith(SHORT_LAST))

    items.sort(key=rank)


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the session's first process (xdist's controller)
        from tests.deploy.faults.harness import REPORT_FILE

        REPORT_FILE.unlink(missing_ok=True)  # a fresh fault-suite report per session


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The fault suite's report (``tests/deploy/faults/``), one line per scenario and store.

    Here, not in ``tests/deploy/faults/conftest.py``: under xdist only this process prints, and it
    loads no conftest below ``tests/``.
    """
    from tests.deploy.faults.harness import REPORT_FILE, Report

    if not REPORT_FILE.exists():
        return
    lines = [Report(**json.loads(line)).line() for line in REPORT_FILE.read_text().splitlines()
             if line.strip()]
    if lines:
        terminalreporter.section("fault suite report")
        for line in sorted(lines):
            terminalreporter.write_line(line)


def pytest_unconfigure(config: pytest.Config) -> None:
    _stop_private_cluster()


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A local Redis Cluster (3 primaries, 3 replicas; tests/redis_cluster.py) for the
    session, started on first use, or yours (``PLUS_TEST_REDIS_CLUSTER``): its URL
    (``redis+cluster://…``, without ``plus+``), also exported as ``PLUS_TEST_REDIS_CLUSTER``."""
    from tests.redis_cluster import CLUSTER_URL_ENV, local_cluster

    if os.environ.get(CLUSTER_URL_ENV):
        yield os.environ[CLUSTER_URL_ENV]
        return
    with local_cluster(tmp_path_factory.mktemp("redis-cluster")) as cluster:
        url = cluster.url.removeprefix("plus+")
        os.environ[CLUSTER_URL_ENV] = url
        try:
            yield url
        finally:
            del os.environ[CLUSTER_URL_ENV]

