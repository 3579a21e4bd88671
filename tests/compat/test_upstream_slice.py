"""Issue 12 acceptance 1, the CI slice: Celery's own ``test_inspect.py`` and ``test_tasks.py``
(from the installed Celery's sdist, ``t/integration``) on ``plus+redis://``.

One run through ``compat_suite.upstream`` (its own ``redis-server`` on a free port, Celery's
session worker with the prefork pool, ``result_extended``, ``task_create_missing_queues=False``
as Celery's conftest configures it), compared with the stored plain ``redis://`` baseline
(``compat_suite/upstream/baselines/``): every test that passes on plain Celery passes here, on
its first try. The full suite on every store runs from ``python -m compat_suite.upstream``
(docs/compat.md, "Celery's own integration suite").
"""

from __future__ import annotations

from pathlib import Path

import pytest

from compat_suite.upstream.__main__ import baseline_path
from compat_suite.upstream.outcomes import Run, compare, summary
from compat_suite.upstream.runner import run_suite
from compat_suite.upstream.servers import broker_for, redis_server
from compat_suite.upstream.source import installed_celery, suite_source

MODULES = ["test_inspect.py", "test_tasks.py"]
#: Wall-clock budget of the slice on this 2-core machine (measured: docs/compat.md).
BUDGET_S = 420


@pytest.fixture(scope="module")
def baseline() -> Run:
    path = baseline_path(installed_celery())
    assert path.is_file(), (
        f"no stored baseline for Celery {installed_celery()}: run "
        "`python -m compat_suite.upstream --broker redis --save-baseline` and commit it")
    return Run.load_file(path).restricted(MODULES)


@pytest.fixture(scope="module")
def plus_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, Path]:
    out = tmp_path_factory.mktemp("upstream")
    source = suite_source()
    with redis_server(out / "redis") as port:
        broker = broker_for("plus+redis", port, out)
        run = run_suite(source, broker, port, out / "suite", MODULES, installed_celery(),
                        log=out / "pytest.log")
    return run, out / "pytest.log"


def _report(baseline: Run, run: Run, log: Path) -> str:
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-60:])
    return f"{summary(baseline, run)}\n--- pytest log (tail): {log} ---\n{tail}"


def test_every_test_passing_on_plain_celery_passes_on_plus_redis(
        baseline: Run, plus_run: tuple[Run, Path]) -> None:
    run, log = plus_run
    regressions = [d for d in compare(baseline, run) if d.regression]
    assert not regressions, _report(baseline, run, log)


def test_the_slice_ran_all_of_its_modules(baseline: Run, plus_run: tuple[Run, Path]) -> None:
    run, log = plus_run
    assert {name.split("::")[0] for name in run.outcomes} == set(MODULES), _report(
        baseline, run, log)
    assert set(run.outcomes) == set(baseline.outcomes), _report(baseline, run, log)
    assert len(baseline.passed()) >= 50


def test_the_slice_runs_within_its_budget(baseline: Run, plus_run: tuple[Run, Path]) -> None:
    run, log = plus_run
    assert run.seconds <= BUDGET_S, f"{run.seconds:.0f}s > {BUDGET_S}s\n" + _report(
        baseline, run, log)
