"""Rendering a run: a text table for the terminal, and JSON or Markdown for ``--report``."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .compare import FAILING, Cell

#: How the reference's own column reads: it ran (``ref``) or raised (``error``).
REFERENCE_MARK = "ref"


@dataclass
class Run:
    """Everything one run observed and concluded."""

    reference: str
    configs: dict[str, dict[str, Any]]
    scenarios: dict[str, str]
    cells: list[Cell] = field(default_factory=list)
    seconds: float = 0.0
    #: Every reference of the run (one per pool / Django variant); ``reference`` is the first.
    references: list[str] = field(default_factory=list)

    def is_reference(self, config: str) -> bool:
        return config == self.reference or config in self.references

    @property
    def ok(self) -> bool:
        return not any(c.status in FAILING for c in self.cells)

    def cell(self, scenario: str, config: str) -> Cell | None:
        for cell in self.cells:
            if cell.scenario == scenario and cell.config == config:
                return cell
        return None

    def summary(self) -> dict[str, int]:
        return dict(Counter(c.status for c in self.cells if not self.is_reference(c.config)))

    def as_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "seconds": round(self.seconds, 1), "reference": self.reference,
                "references": self.references,
                "summary": self.summary(), "configs": self.configs,
                "scenarios": self.scenarios, "cells": [asdict(c) for c in self.cells]}


def _rows(run: Run) -> list[list[str]]:
    names = list(run.configs)
    rows = [["scenario", *names]]
    for scenario in run.scenarios:
        row = [scenario]
        for name in names:
            cell = run.cell(scenario, name)
            row.append("-" if cell is None else cell.status)
        rows.append(row)
    return rows


def _details(run: Run) -> list[str]:
    lines = []
    for cell in run.cells:
        if cell.status in ("pass", "n/a") or (run.is_reference(cell.config)
                                              and cell.status != "error"):
            continue
        lines.append(f"{cell.scenario} on {cell.config}: {cell.status}"
                     + (f" ({cell.note})" if cell.note else ""))
        lines += [f"    {d.path}: reference={d.reference!r} observed={d.observed!r}"
                  + ("" if d.reason else "  <- not explained") for d in cell.differences]
        reasons = dict.fromkeys(d.reason for d in cell.differences if d.reason)
        lines += [f"    why: {reason}" for reason in reasons]
        if cell.error:
            lines += [f"    {line}" for line in cell.error.rstrip().splitlines()]
    return lines


def _config_lines(run: Run) -> list[str]:
    lines = []
    for name, info in run.configs.items():
        status = f"ERROR: {info['error']}" if info.get("error") else f"{info['seconds']:.1f}s"
        lines.append(f"{name}: {info['doc']} — {status}")
    return lines


def text(run: Run) -> str:
    """The table, the configurations, and every cell that is not a plain pass."""
    rows = _rows(run)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    table = ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip()
             for r in rows]
    summary = ", ".join(f"{n} {s}" for s, n in sorted(run.summary().items()))
    verdict = "OK" if run.ok else "FAILED"
    return "\n".join([*table, "", *_config_lines(run), "", *_details(run), "",
                      f"{verdict}: {summary} in {run.seconds:.1f}s"])


def markdown(run: Run) -> str:
    rows = _rows(run)
    table = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    table += ["| " + " | ".join(r) + " |" for r in rows[1:]]
    details = _details(run)
    verdict = "OK" if run.ok else "FAILED"
    return "\n".join([
        "# Compatibility suite report", "",
        f"**{verdict}** in {run.seconds:.1f}s — reference: `{run.reference}`.", "",
        *table, "", "## Configurations", "", *[f"- {line}" for line in _config_lines(run)], "",
        "## Scenarios", "", *[f"- `{name}`: {doc}" for name, doc in run.scenarios.items()], "",
        "## Differences and errors", "",
        *(["```", *details, "```"] if details else ["None."]), ""])


def write(run: Run, path: Path) -> None:
    """``path`` ending in ``.md``: Markdown; anything else: JSON."""
    if path.suffix == ".md":
        path.write_text(markdown(run))
    else:
        path.write_text(json.dumps(run.as_dict(), indent=1, default=str) + "\n")
