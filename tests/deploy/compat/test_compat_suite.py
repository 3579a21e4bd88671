"""Acceptance line 1 of issue 6: the compatibility suite passes on every ``plus+`` store.

One run of ``compat_suite.run`` (the four deployments side by side: plain Celery on redis://
as the reference, and the import-swapped project on plus+redis://, plus+sqlite:// and
plus+postgresql://), then one test per configuration: every scenario matches the reference
or differs only where docs/compat.md says it does on purpose. The report (Markdown) is in the
test's tmp dir, or at ``$COMPAT_REPORT`` when set.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from compat_suite.compare import FAILING
from compat_suite.configs import CONFIGS, REFERENCE, Servers
from compat_suite.report import Run, text, write
from compat_suite.run import run
from tests.fast.conformance.stores import PG_URL, REDIS_URL

#: Wall-clock budget of the whole suite on this 2-core machine (the brief's limit).
# One xdist worker runs the module, so its module-scoped run is made once, not once per
# worker that gets one of its tests.
pytestmark = pytest.mark.xdist_group("compat-suite")

BUDGET_S = 150
PLUS_CONFIGS = [name for name in CONFIGS if name != REFERENCE.name]


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory) -> Run:
    servers = Servers(redis=REDIS_URL.rsplit("/", 1)[0], postgres=PG_URL)
    logs = tmp_path_factory.mktemp("compat-logs")
    result = run(list(CONFIGS), [], servers, jobs=len(CONFIGS), logs=logs)
    report = Path(os.environ.get("COMPAT_REPORT")
                  or tmp_path_factory.mktemp("compat") / "compat-report.md")
    write(result, report)
    print(f"\n{text(result)}\nreport: {report}\nworker and beat logs: {logs}")
    return result


def test_the_reference_runs_every_scenario(suite: Run) -> None:
    ref = suite.configs[REFERENCE.name]
    assert ref["error"] is None, text(suite)
    errors = [c for c in suite.cells if c.config == REFERENCE.name and c.status == "error"]
    assert not errors, text(suite)
    assert ref["swapped_files"] == [], "the reference must run the project unchanged"


@pytest.mark.parametrize("config", PLUS_CONFIGS)
def test_celery_plus_matches_plain_celery(suite: Run, config: str) -> None:
    info = suite.configs[config]
    assert info["error"] is None, text(suite)
    # The import swap really happened: the project's own files now import celery_plus.
    assert "proj/celery.py" in info["swapped_files"], info["swapped_files"]
    cells = [c for c in suite.cells if c.config == config]
    assert {c.scenario for c in cells} == set(suite.scenarios)
    failing = [f"{c.scenario}: {c.status}" for c in cells if c.status in FAILING]
    assert not failing, f"{failing}\n{text(suite)}"


def test_the_suite_runs_within_its_budget(suite: Run) -> None:
    assert suite.seconds <= BUDGET_S, f"{suite.seconds:.1f}s > {BUDGET_S}s\n{text(suite)}"
