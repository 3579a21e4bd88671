"""Outcomes of one run of the suite, stored baselines, and the comparison of two runs.

An outcome is pytest's word for a test case: ``passed``, ``failed``, ``error``, ``skipped``,
``xfailed`` (or ``missing`` when a test ran on one side only). Test ids are pytest node ids
relative to ``t/integration`` (``test_inspect.py::test_Inspect::test_ping``).
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

PASSED = "passed"

#: Tests of Celery's suite whose outcome is a race in the test itself, on any broker: a
#: failure of one is reported, not counted as a regression. Each entry says what races.
KNOWN_RACES: dict[str, str] = {
    "test_tasks.py::test_task_replacement::test_replaced_task_nesting_level_0":
        "resets the flag its task_received handler sets only after delay() returns, so a "
        "delivery faster than the next line is overwritten (fails on plain redis:// too)",
}


@dataclass
class Run:
    """One run of the suite on one broker."""

    broker: str
    celery: str
    outcomes: dict[str, str]
    #: The first line of each non-passing test's failure (what it said).
    messages: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    #: The 1-minute load average when the run started and ended.
    load: tuple[float, float] = (0.0, 0.0)
    modules: list[str] = field(default_factory=list)
    #: Seconds each test took (setup, call, teardown), from pytest's report.
    durations: dict[str, float] = field(default_factory=dict)
    #: For a run cut down to some tests (:meth:`only`): the whole run's ``seconds``; ``seconds``
    #: is then the sum of the kept tests' durations.
    part_of: float | None = None

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for outcome in self.outcomes.values():
            out[outcome] = out.get(outcome, 0) + 1
        return dict(sorted(out.items()))

    def passed(self) -> set[str]:
        return {name for name, outcome in self.outcomes.items() if outcome == PASSED}

    def only(self, names: set[str], modules: list[str] | None = None) -> Run:
        """This run's outcomes for the tests ``names`` only, timed by their own durations."""
        keep = {name: o for name, o in self.outcomes.items() if name in names}
        durations = {n: d for n, d in self.durations.items() if n in keep}
        return Run(self.broker, self.celery, keep,
                   {n: m for n, m in self.messages.items() if n in keep},
                   round(sum(durations.values()), 1), self.load,
                   self.modules if modules is None else modules, durations,
                   self.part_of if self.part_of is not None else self.seconds)

    def restricted(self, modules: list[str]) -> Run:
        """This run's outcomes for tests of ``modules`` only (all when empty)."""
        if not modules:
            return self
        return self.only({n for n in self.outcomes if n.split("::", 1)[0] in modules}, modules)

    def time_text(self) -> str:
        """How long the run took; for a cut-down run, its tests' share of the whole run."""
        if self.part_of is None:
            return f"{self.seconds:.0f}s"
        share = (f"{self.seconds:.0f}s of test time" if self.durations
                 else "time per test not recorded")
        return f"{share} in a {self.part_of:.0f}s run of more tests"

    def save(self, path: Path) -> None:
        data = asdict(self)
        data["outcomes"] = dict(sorted(self.outcomes.items()))
        data["messages"] = dict(sorted(self.messages.items()))
        path.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")

    @classmethod
    def load_file(cls, path: Path) -> Run:
        data: dict[str, Any] = json.loads(path.read_text())
        data["load"] = tuple(data.get("load") or (0.0, 0.0))
        return cls(**data)


def node_id(classname: str, name: str) -> str:
    """``t.integration.test_x.test_C`` + ``test_y[p]`` -> ``test_x.py::test_C::test_y[p]``."""
    parts = classname.split(".")
    start = parts.index("integration") + 1 if "integration" in parts else 0
    module, classes = parts[start], parts[start + 1:]
    return "::".join([f"{module}.py", *classes, name])


def read_junit(path: Path) -> tuple[dict[str, str], dict[str, str], dict[str, float]]:
    """Outcomes, failure messages and durations from pytest's ``--junitxml`` report.

    A test whose call passed but whose teardown errored appears twice; the worse outcome wins
    (and the durations add up).
    """
    outcomes: dict[str, str] = {}
    messages: dict[str, str] = {}
    durations: dict[str, float] = {}
    rank = {"passed": 0, "skipped": 1, "xfailed": 1, "failed": 2, "error": 3}
    for case in ET.parse(path).getroot().iter("testcase"):
        name = node_id(case.get("classname", ""), case.get("name", ""))
        durations[name] = round(durations.get(name, 0.0) + float(case.get("time") or 0), 3)
        outcome, message = PASSED, ""
        for child in case:
            if child.tag in ("failure", "error"):
                outcome, message = ("failed" if child.tag == "failure" else "error",
                                    child.get("message") or "")
            elif child.tag == "skipped":
                xfail = child.get("type") == "pytest.xfail"
                outcome, message = ("xfailed" if xfail else "skipped"), child.get("message") or ""
        if rank[outcome] >= rank.get(outcomes.get(name, PASSED), 0):
            outcomes[name] = outcome
            if message:
                messages[name] = message.strip().splitlines()[0][:300] if message.strip() else ""
    return outcomes, messages, durations


@dataclass(frozen=True)
class Difference:
    test: str
    reference: str
    actual: str
    message: str = ""

    @property
    def known_race(self) -> bool:
        return self.test in KNOWN_RACES

    @property
    def regression(self) -> bool:
        """Passes on plain Celery, does not pass here (a known race in the test aside)."""
        return self.reference == PASSED and self.actual != PASSED and not self.known_race


def compare(reference: Run, actual: Run) -> list[Difference]:
    """Every test whose outcome differs between the two runs, regressions first."""
    names = sorted(set(reference.outcomes) | set(actual.outcomes))
    diffs = [Difference(n, reference.outcomes.get(n, "missing"), actual.outcomes.get(n, "missing"),
                        actual.messages.get(n, ""))
             for n in names
             if reference.outcomes.get(n, "missing") != actual.outcomes.get(n, "missing")]
    return sorted(diffs, key=lambda d: (not d.regression, d.test))


def summary(reference: Run, actual: Run) -> str:
    """The comparison as text: counts, then one line per difference."""
    diffs = compare(reference, actual)
    regressions = [d for d in diffs if d.regression]
    ref_passed = reference.passed()
    kept = len(ref_passed & actual.passed())
    lines = [
        f"{actual.broker}: {actual.counts()} in {actual.time_text()} "
        f"(load {actual.load[0]:.1f} -> {actual.load[1]:.1f})",
        f"  reference {reference.broker}: {len(ref_passed)} passed of {len(reference.outcomes)}",
        f"  {kept} of the {len(ref_passed)} that pass on the reference pass here; "
        f"{len(ref_passed) - kept} do not: {len(regressions)} regression(s), "
        f"{len(ref_passed) - kept - len(regressions)} known race(s)",
    ]
    for d in diffs:
        mark = ("REGRESSION" if d.regression else
                "known race" if d.known_race else "difference")
        tail = f"  -- {d.message}" if d.message else ""
        if d.known_race:
            tail += f"  (the test {KNOWN_RACES[d.test]})"
        lines.append(f"  {mark}: {d.test}: {d.reference} -> {d.actual}{tail}")
    return "\n".join(lines)
