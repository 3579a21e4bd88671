"""The suite's own logic: the import swap (on strings and on the real project) and how a
cell's status follows from the observations. Pure logic, no servers."""

from __future__ import annotations

from pathlib import Path

import pytest

from compat_suite import compare as compare_module
from compat_suite.compare import compare, differences
from compat_suite.deployment import PROJECT
from compat_suite.swap import SwapError, celery_imports, materialise, swap_source


def test_celery_imports_are_rewritten_and_nothing_else() -> None:
    source = (
        "from celery import Celery, shared_task\n"
        "from celery.exceptions import SoftTimeLimitExceeded\n"
        "from celery.signals import (\n    task_prerun,\n)\n"
        "import celery\n"
        "from .celery import app\n"
        "from celery_tools import x\n"
        "name = 'from celery import Celery'\n"
    )
    swapped = swap_source(source)
    assert swapped.splitlines() == [
        "from celery_plus import Celery, shared_task",
        "from celery_plus.exceptions import SoftTimeLimitExceeded",
        "from celery_plus.signals import (", "    task_prerun,", ")",
        "import celery_plus as celery",
        "from .celery import app",
        "from celery_tools import x",
        "name = 'from celery import Celery'",
    ]
    assert celery_imports(swapped) == []


def test_an_import_form_the_swap_cannot_rewrite_is_refused() -> None:
    with pytest.raises(SwapError, match=r"import celery\.<module>"):
        swap_source("import celery.result\n", "proj/x.py")


def test_the_materialised_project_imports_celery_plus_only(tmp_path: Path) -> None:
    changed = materialise(PROJECT, tmp_path / "project")
    originals = {p.relative_to(PROJECT) for p in PROJECT.rglob("*.py")
                 if celery_imports(p.read_text())}
    assert {p.relative_to(tmp_path / "project") for p in changed} == originals
    assert {Path("proj/celery.py"), Path("proj/signals.py"), Path("proj/tasks/reports.py"),
            Path("scenarios/canvas.py")} <= originals
    for path in (tmp_path / "project").rglob("*.py"):
        assert celery_imports(path.read_text()) == [], path


def test_differences_are_reported_by_path() -> None:
    ref = {"a": 1, "b": [1, 2], "c": {"d": "x"}, "e": [1]}
    obs = {"a": 1, "b": [1, 3], "c": {"d": "y", "f": 0}, "e": [1, 2]}
    assert [(d.path, d.reference, d.observed) for d in differences(ref, obs)] == [
        ("b[1]", 2, 3), ("c.d", "x", "y"), ("c.f", "<missing>", 0), ("e", [1], [1, 2])]


def _ok(outcome: object) -> dict:
    return {"outcome": outcome, "error": None, "seconds": 0.1}


def test_a_cell_passes_differs_or_is_explained(monkeypatch: pytest.MonkeyPatch) -> None:
    assert compare("s", "c", _ok({"x": 1}), _ok({"x": 1})).status == "pass"
    assert compare("s", "c", _ok({"x": 1}), _ok({"x": 2})).status == "differs"
    assert compare("s", "c", _ok({"x": 1}), {"error": "boom"}).status == "error"
    monkeypatch.setattr(compare_module, "INTENTIONAL", {("s", "x"): "on purpose"})
    cell = compare("s", "c", _ok({"x": {"y": 1}, "z": 1}), _ok({"x": {"y": 2}, "z": 1}))
    assert cell.status == "intentional" and cell.differences[0].reason == "on purpose"
    assert compare("s", "c", _ok({"x": 1, "z": 1}), _ok({"x": 2, "z": 2})).status == "differs"


def test_an_expected_failure_must_keep_failing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compare_module, "EXPECTED_FAILURES", {("s", "c"): "known gap"})
    assert compare("s", "c", _ok(1), _ok(2)).status == "xfail"
    assert compare("s", "c", _ok(1), {"error": "boom"}).status == "xfail"
    assert compare("s", "c", _ok(1), _ok(1)).status == "xpass"
