"""Model-based tests: the SQLite store against the reference model (``machine.py``); the
server stores run it in ``tests/stores/model``.

One state machine per store. The number of examples is the CI budget unless
``PLUS_MODEL_EXAMPLES`` says otherwise (``tests/fast/model/run_long.sh``); the steps per example
``PLUS_MODEL_STEPS``; ``PLUS_MODEL_FRESH=1`` starts without Hypothesis's database of earlier
failures and does not shrink what it finds (to measure how many examples a search takes).
"""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import HealthCheck, Phase, settings

from .clocks import SQLiteUnderTest
from .machine import OPTIONS, StoreVsModel

#: Examples per store in CI: about 10 s each on this machine's busy two cores (figures in
#: docs/model.md).
CI_EXAMPLES = {"redis": 50, "sqlite": 150, "postgres": 50}


def _settings(kind: str) -> settings:
    return settings(
        max_examples=int(os.environ.get("PLUS_MODEL_EXAMPLES", CI_EXAMPLES[kind])),
        stateful_step_count=int(os.environ.get("PLUS_MODEL_STEPS", 40)),
        deadline=None, suppress_health_check=list(HealthCheck),
        **({"database": None, "phases": (Phase.generate,)}
           if os.environ.get("PLUS_MODEL_FRESH") else {}))


def run_model(machine: type[StoreVsModel], kind: str) -> None:
    case = machine.TestCase
    case.settings = _settings(kind)
    case().runTest()


def test_sqlite_agrees_with_the_model(tmp_path: Path) -> None:
    class OnSQLite(StoreVsModel):
        open_store = staticmethod(lambda clock: SQLiteUnderTest(clock, tmp_path, OPTIONS))

    run_model(OnSQLite, "sqlite")
