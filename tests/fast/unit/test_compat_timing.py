"""The compatibility suite's timing verdict (compat_suite/project/scenarios/support.py,
``on_time``; docs/compat.md, "Timing verdicts"): a delayed run that starts early fails, one a
second late in either step fails, and the load a CI adds to each step passes."""

from __future__ import annotations

import importlib.util
import sys
import types
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import pytest

SUPPORT = (Path(__file__).resolve().parents[3] / "compat_suite" / "project" / "scenarios"
           / "support.py")
AFTER = 1_000_000.0  # the moment the run waits from (a time.time())


@pytest.fixture
def on_time(monkeypatch: pytest.MonkeyPatch) -> Callable[..., bool]:
    """The verdict, from the project's ``scenarios/support.py``. Its imports of the project
    (``proj.effects``, ``proj.settings``) get stand-ins: importing ``proj`` itself would
    connect its signal handlers, which record every publish in Redis, in this process."""
    project = types.ModuleType("proj")
    effects = types.ModuleType("proj.effects")
    effects.effects = lambda *args, **kwargs: []  # type: ignore[attr-defined]
    settings = types.ModuleType("proj.settings")
    settings.PREFIX = "proj"  # type: ignore[attr-defined]
    for name, module in (("proj", project), ("proj.effects", effects),
                         ("proj.settings", settings)):
        monkeypatch.setitem(sys.modules, name, module)
    spec = importlib.util.spec_from_file_location("compat_scenarios_support", SUPPORT)
    assert spec is not None and spec.loader is not None
    support = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(support)
    verdict: Callable[..., bool] = support.on_time
    return verdict


def iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).isoformat()


def run(on_time: Callable[..., bool], eta_after: float, start_after_eta: float,
        due: float = 1.0) -> bool:
    """The verdict on a run whose ETA came ``eta_after`` s after ``AFTER`` and which started
    ``start_after_eta`` s after its ETA."""
    eta = AFTER + eta_after
    return bool(on_time(AFTER, eta + start_after_eta, iso(eta), due))


def test_a_prompt_run_and_a_loaded_ci_s_delays_are_on_time(on_time: Callable[..., bool]) -> None:
    assert run(on_time, 1.001, 0.006)  # plain Celery on Redis, unloaded
    assert run(on_time, 1.035, 0.102)  # the slowest seen at load average 5-8
    assert run(on_time, 1.6, 0.9)  # 0.6 s to publish the retry, 0.9 s to start it


def test_a_run_before_its_due_time_fails(on_time: Callable[..., bool]) -> None:
    assert not run(on_time, 1.0, -0.05)  # started before its ETA
    assert not run(on_time, 0.9, 0.0)  # an ETA earlier than due (a shortened delay)
    assert not run(on_time, 0.5, 0.4)  # both: started 0.1 s early, whatever the gap's split


def test_a_run_a_second_late_fails(on_time: Callable[..., bool]) -> None:
    assert not run(on_time, 1.0, 1.05)  # started a second after its ETA
    assert not run(on_time, 2.05, 0.0)  # given an ETA a second late
    assert not run(on_time, 3.0, 3.0)  # seconds late in both


def test_a_delayed_run_without_an_eta_fails(on_time: Callable[..., bool]) -> None:
    assert not on_time(AFTER, AFTER + 1.01, None, 1.0)
