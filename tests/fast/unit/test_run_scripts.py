"""The long-run scripts under ``tests/`` start from the checkout's root.

Each runs ``.venv/bin/pytest`` (or ``$PYTHON``) and paths relative to the root after a
``cd "$(dirname "$0")/…"``; when the layout by role moved three of them a folder deeper, their
``cd`` still climbed two folders and landed in ``tests/``, where no ``.venv`` is, so
``tests/deploy/faults/run_long.sh`` failed at once (exit 127).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPTS = sorted((ROOT / "tests").rglob("*.sh"))
CD = re.compile(r'^cd "\$\(dirname "\$0"\)/([./]+)"( \|\| exit 1)?$', re.M)


def test_there_are_scripts_to_check() -> None:
    assert {p.relative_to(ROOT).as_posix() for p in SCRIPTS} >= {
        "tests/run_long.sh", "tests/deploy/faults/run_long.sh",
        "tests/fast/model/run_long.sh", "tests/deploy/cluster/run.sh"}


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_each_script_changes_to_the_checkout_root(script: Path) -> None:
    [(climb, _)] = CD.findall(script.read_text())
    assert (script.parent / climb).resolve() == ROOT, climb
