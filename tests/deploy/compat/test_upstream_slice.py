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


def baseline() -> Run:
    path = baseline_path(installed_celery())
    assert path.is_file(), (
        f"no stored baseline for Celery {installed_celery()}: run "
        "`python -m compat_suite.upstream --broker redis --save-baseline` and commit it")
    return Run.load_file(path).restricted(MODULES)


def _report(baseline: Run, run: Run, log: Path) -> str:
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-60:])
    return f"{summary(baseline, run)}\n--- pytest log (tail): {log} ---\n{tail}"


# pytest-timeout's 300 s (pyproject.toml) is below the budget: the run's own timeout and the
# budget assertion decide, with a margin for the baseline's checks.
@pytest.mark.long
@pytest.mark.timeout(2 * BUDGET_S + 60)
def test_celerys_inspect_and_task_tests_pass_on_plus_redis_as_on_plain_celery(
        tmp_path: Path) -> None:
    """One test (one run of the slice, whichever pytest-xdist worker gets it)."""
    expected = baseline()
    source = suite_source()
    with redis_server(tmp_path / "redis") as port:
        broker = broker_for("plus+redis", port, tmp_path)
        run = run_suite(source, broker, port, tmp_path / "suite", MODULES, installed_celery(),
                        log=tmp_path / "pytest.log", timeout=2 * BUDGET_S)
    report = _report(expected, run, tmp_path / "pytest.log")
    print(f"\n{summary(expected, run)}")
    # Every test of both modules ran, on both sides.
    assert {name.split("::")[0] for name in run.outcomes} == set(MODULES), report
    assert set(run.outcomes) == set(expected.outcomes), report
    assert len(expected.passed()) >= 50, report
    # Every test passing on plain Celery passes here, on its first try.
    regressions = [d for d in compare(expected, run) if d.regression]
    assert not regressions, report
    assert run.seconds <= BUDGET_S, f"{run.seconds:.0f}s > {BUDGET_S}s\n{report}"
