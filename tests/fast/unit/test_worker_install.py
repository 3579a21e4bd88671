"""celery_plus.worker.install(): the one entry into Celery's worker, and its version check."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from celery import signals
from celery.exceptions import ImproperlyConfigured

import celery_plus
from celery_plus import worker
from celery_plus.worker.versions import BILLIARD, CELERY, OPT_OUT, Checked, check_versions


def _receivers(signal: object) -> int:
    return len(signal.receivers)  # type: ignore[attr-defined]


def test_install_twice_connects_each_receiver_once() -> None:
    watched = (signals.worker_init, signals.worker_ready, signals.worker_process_init,
               signals.before_task_publish)
    before = [_receivers(s) for s in watched]
    worker.install()
    worker.install()
    assert [_receivers(s) for s in watched] == before  # importing celery_plus installed it


def test_no_module_connects_a_signal_when_imported() -> None:
    """Only install() connects: no module-level ``signal.connect(...)`` call or
    ``@signal.connect`` decorator anywhere in the package."""
    found = []
    for path in sorted(Path(celery_plus.__file__).parent.rglob("*.py")):
        tree = ast.parse(path.read_text())
        for node in tree.body:
            calls = [d for d in getattr(node, "decorator_list", [])]
            if isinstance(node, ast.Expr):
                calls.append(node.value)
            for call in calls:
                func = call.func if isinstance(call, ast.Call) else call
                if isinstance(func, ast.Attribute) and func.attr == "connect":
                    found.append(f"{path.name}:{node.lineno}")
    assert found == []


@pytest.mark.parametrize("checked, version, holds", [
    (CELERY, "5.7.0", True), (CELERY, "5.6.0", False), (CELERY, "5.4.0", False),
    (CELERY, "6.0.0", False), (BILLIARD, "4.3.2", True), (BILLIARD, "4.2.1", False),
    (BILLIARD, "5.0.0", False),
])
def test_checked_ranges(checked: Checked, version: str, holds: bool) -> None:
    assert checked.holds(version) is holds


def test_a_celery_outside_the_checked_range_fails_at_start_naming_the_fix(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(OPT_OUT, raising=False)
    with pytest.raises(ImproperlyConfigured) as err:
        check_versions({"celery": "6.1.0", "billiard": "4.3.2"})
    message = str(err.value)
    assert "celery 6.1.0 is installed" in message
    assert "'celery>=5.7,<5.8'" in message and OPT_OUT in message
    check_versions({"celery": "5.7.0", "billiard": "4.3.2"})  # the checked ones pass


def test_the_opt_out_runs_unchecked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(OPT_OUT, "1")
    check_versions({"celery": "6.1.0", "billiard": "9.0"})


def test_a_worker_refuses_to_start_on_an_unchecked_celery(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The check runs where a worker starts (its first bootstep), not at import: a publisher
    on any version imports celery_plus."""
    from types import SimpleNamespace

    from celery_plus.worker import versions
    from celery_plus.worker.bootsteps import DurableSetup

    monkeypatch.delenv(OPT_OUT, raising=False)
    monkeypatch.setattr(versions.metadata, "version",
                        lambda name: {"celery": "6.1.0"}.get(name, "4.3.2"))
    with pytest.raises(ImproperlyConfigured, match=r"celery 6\.1\.0 is installed"):
        DurableSetup(SimpleNamespace(app=None))
