"""Comparing a deployment's observations with the reference's, scenario by scenario.

A cell (scenario on a configuration) is ``n/a`` (the scenario does not apply to the
deployment's pool or kind, on the reference neither), ``pass`` (same outcome),
``intentional`` (every difference is one :data:`~compat_suite.intentional.INTENTIONAL`
explains), ``differs``, ``error`` (the scenario raised or timed out), ``xfail`` (a known
incompatibility listed in :data:`~compat_suite.intentional.EXPECTED_FAILURES` still shows)
or ``xpass`` (it no longer does: remove the entry).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .intentional import EXPECTED_FAILURES, INTENTIONAL

#: Statuses that make a run fail.
FAILING = ("differs", "error", "xpass")
#: The scenario does not apply to this deployment's pool or kind (on the reference neither).
NOT_APPLICABLE = "n/a"


@dataclass(frozen=True)
class Difference:
    path: str
    reference: Any
    observed: Any
    #: Why this difference is intended (None: it is not).
    reason: str | None = None

    def __str__(self) -> str:
        note = f"  [intentional: {self.reason}]" if self.reason else ""
        return f"{self.path}: reference={self.reference!r} observed={self.observed!r}{note}"


@dataclass(frozen=True)
class Cell:
    scenario: str
    config: str
    status: str
    differences: list[Difference] = field(default_factory=list)
    error: str | None = None
    note: str | None = None
    seconds: float | None = None


def differences(reference: Any, observed: Any, path: str = "") -> list[Difference]:
    """Every leaf where ``observed`` differs from ``reference`` (dicts by key, lists by index)."""
    if isinstance(reference, dict) and isinstance(observed, dict):
        found = []
        for key in sorted(set(reference) | set(observed), key=str):
            sub = f"{path}.{key}" if path else str(key)
            if key not in observed:
                found.append(Difference(sub, reference[key], "<missing>"))
            elif key not in reference:
                found.append(Difference(sub, "<missing>", observed[key]))
            else:
                found += differences(reference[key], observed[key], sub)
        return found
    if (isinstance(reference, list) and isinstance(observed, list)
            and len(reference) == len(observed)):
        found = []
        for i, (ref, obs) in enumerate(zip(reference, observed, strict=True)):
            found += differences(ref, obs, f"{path}[{i}]")
        return found
    return [] if reference == observed else [Difference(path, reference, observed)]


def _explained(scenario: str, diff: Difference) -> Difference:
    for (name, prefix), reason in INTENTIONAL.items():
        if name == scenario and (diff.path == prefix or diff.path.startswith(prefix + ".")
                                 or diff.path.startswith(prefix + "[")):
            return Difference(diff.path, diff.reference, diff.observed, reason)
    return diff


def compare(scenario: str, config: str, reference: dict[str, Any],
            observed: dict[str, Any]) -> Cell:
    """The cell of ``scenario`` on ``config`` (both are driver observations of the scenario)."""
    expected_failure = EXPECTED_FAILURES.get((scenario, config))
    seconds = observed.get("seconds")
    if reference.get("not_applicable") or observed.get("not_applicable"):
        same = reference.get("not_applicable") == observed.get("not_applicable")
        return Cell(scenario, config, NOT_APPLICABLE if same else "error",
                    note=reference.get("not_applicable") or observed.get("not_applicable"),
                    error=None if same else "applies to one deployment and not the other")
    if reference.get("error"):
        return Cell(scenario, config, "error", error=f"reference: {reference['error']}",
                    seconds=seconds)
    if observed.get("error"):
        status = "xfail" if expected_failure else "error"
        return Cell(scenario, config, status, error=observed["error"], note=expected_failure,
                    seconds=seconds)
    diffs = [_explained(scenario, d)
             for d in differences(reference["outcome"], observed["outcome"])]
    unexplained = [d for d in diffs if d.reason is None]
    if expected_failure:
        status = "xfail" if unexplained else "xpass"
    elif unexplained:
        status = "differs"
    else:
        status = "intentional" if diffs else "pass"
    return Cell(scenario, config, status, diffs, note=expected_failure, seconds=seconds)
