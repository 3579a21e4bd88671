"""The compatibility suite's timing verdict (compat_suite/project/scenarios/support.py,
``on_time``; docs/compat.md, "Timing verdicts"): a delayed run that starts early fails, one a
second late in either step fails, and the load a CI adds to each step passes."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[3] / "compat_suite" / "project"
AFTER = 1_000_000.0  # the moment the run waits from (a time.time())


@pytest.fixture
def on_time(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., bool]]:
    """The verdict, imported from the project as its scenarios import it (``proj`` and
    ``scenarios`` are the project's top-level packages; they are forgotten afterwards)."""
    monkeypatch.syspath_prepend(str(PROJECT))
    from scenarios.support import on_time as verdict

    yield verdict
    for name in [m for m in sys.modules if m.split(".")[0] in ("proj", "scenarios")]:
        del sys.modules[name]


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
