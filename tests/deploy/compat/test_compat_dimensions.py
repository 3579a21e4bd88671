"""Acceptance 3 of issue 12: the compatibility suite's pool and Django dimensions.

Two runs of ``compat_suite.run``: the project on the threads, gevent and solo pools (plain
Celery on each pool as that pool's reference, celery-plus on ``plus+redis://``), and the
project deployed as a Django project (``djsite``: Celery settings in Django's settings, the
``django_on_commit`` scenario) on every store. Every cell must match its reference or differ
only where docs/compat.md says so; a scenario that plain Celery cannot run on a pool (hard
time limits off prefork) is ``n/a`` on both. The prefork/plain-project run is
``test_compat_suite.py``; the full matrix (every store on every pool) is
``python -m compat_suite.run --pool prefork --pool threads --pool gevent --pool solo --django``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from compat_suite.compare import FAILING
from compat_suite.configs import Servers
from compat_suite.report import Run, text, write
from compat_suite.run import run
from tests.fast.conformance.stores import PG_URL, REDIS_URL

# One xdist worker runs the module, so its module-scoped run is made once, not once per
# worker that gets one of its tests.
pytestmark = [pytest.mark.xdist_group("compat-dimensions"), pytest.mark.long]

POOL_RUN = {"names": ["plus-redis"], "pools": ["threads", "gevent", "solo"], "django": False}
DJANGO_RUN = {"names": ["plus-redis", "plus-sqlite", "plus-postgres"], "pools": ["prefork"],
              "django": True, "plain": False}


def _run(tmp_path_factory: pytest.TempPathFactory, name: str, spec: dict[str, Any]) -> Run:
    servers = Servers(redis=REDIS_URL.rsplit("/", 1)[0], postgres=PG_URL)
    logs = tmp_path_factory.mktemp(f"compat-{name}-logs")
    result = run(spec["names"], [], servers, jobs=3, logs=logs, pools=spec["pools"],
                 django=spec["django"], plain=spec.get("plain", True))
    report = Path(os.environ.get("COMPAT_REPORT_DIR") or tmp_path_factory.mktemp("compat"))
    write(result, report / f"compat-{name}.md")
    print(f"\n{text(result)}\nlogs: {logs}")
    return result


@pytest.fixture(scope="module")
def pools(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return _run(tmp_path_factory, "pools", POOL_RUN)


@pytest.fixture(scope="module")
def django(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return _run(tmp_path_factory, "django", DJANGO_RUN)


def _check(suite: Run, prefix: str) -> None:
    assert all(info["error"] is None for info in suite.configs.values()), text(suite)
    reference_errors = [c for c in suite.cells if suite.is_reference(c.config)
                        and c.status == "error"]
    assert not reference_errors, text(suite)
    failing = [f"{c.scenario} on {c.config}: {c.status}" for c in suite.cells
               if c.status in FAILING]
    assert not failing, f"{failing}\n{text(suite)}"
    ran = {c.config for c in suite.cells if c.status in ("pass", "intentional")}
    assert all(name.startswith(prefix) or suite.is_reference(name) for name in ran)


@pytest.mark.parametrize("pool", POOL_RUN["pools"])
def test_every_pool_matches_plain_celery_on_that_pool(pools: Run, pool: str) -> None:
    _check(pools, "plus-redis/")
    cells = [c for c in pools.cells if c.config == f"plus-redis/{pool}"]
    assert cells and sum(c.status == "pass" for c in cells) >= len(cells) - 4, text(pools)
    assert {c.scenario for c in cells if c.status == "n/a"} <= {
        "time_limits", "revoke_terminate", "django_on_commit"}


def test_the_django_project_matches_plain_celery_on_every_store(django: Run) -> None:
    _check(django, "plus-")
    on_commit = [c for c in django.cells if c.scenario == "django_on_commit"]
    assert {c.config: c.status for c in on_commit} == {
        "celery-redis/django": "ref", "plus-redis/django": "pass",
        "plus-sqlite/django": "pass", "plus-postgres/django": "pass"}, text(django)
