"""Issue 30 point 11: the import swap table of docs/migration.md is true: every module it
promises under ``celery_plus`` imports and re-exports Celery's names, and its ``sed`` line
rewrites those imports only."""

from __future__ import annotations

import importlib
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.fast.unit.test_app import CELERY_TOP_LEVEL

DOC = Path(__file__).resolve().parents[3] / "docs" / "migration.md"


def _table() -> list[tuple[str, str]]:
    text = DOC.read_text()
    body = text.split("<!-- swap-table: start")[1].split("<!-- swap-table: end")[0]
    rows = re.findall(r"^\| `from (celery[\w.]*) import …` \| `from (celery_plus[\w.]*) import …`",
                      body, re.M)
    assert rows, "no swap table in docs/migration.md"
    return rows


def _sed() -> str:
    text = DOC.read_text()
    [command] = re.findall(r"^git ls-files '\*\.py' \| xargs (sed .+)$", text, re.M)
    return command


@pytest.mark.parametrize(("theirs", "ours"), _table())
def test_every_module_the_swap_table_promises_imports_and_re_exports_celery(
        theirs: str, ours: str) -> None:
    celery_module = importlib.import_module(theirs)
    plus_module = importlib.import_module(ours)
    # Celery's top level lists version metadata and internals in __all__ too: its public
    # names are test_app.py's CELERY_TOP_LEVEL.
    names = CELERY_TOP_LEVEL if theirs == "celery" else getattr(celery_module, "__all__", ())
    for name in names:
        assert getattr(plus_module, name) is not None, (ours, name)
        if theirs != "celery":
            assert getattr(plus_module, name) is getattr(celery_module, name), (ours, name)


def test_the_swap_tables_sed_rewrites_only_what_the_table_promises(tmp_path: Path) -> None:
    if shutil.which("sed") is None:
        pytest.skip("no sed")
    source = tmp_path / "tasks.py"
    promised = [f"from {theirs} import x" for theirs, _ in _table()]
    kept = ["from celery.app.task import Task", "from celery.beat import Scheduler",
            "from celery.contrib.testing.worker import start_worker",
            "from celery.utils.functional import noop", "import celery",
            "from celery.bin.base import CeleryCommand", "from celery_plus import Celery",
            "    from celery.worker.request import Request"]
    source.write_text("\n".join([*promised, "    from celery.result import AsyncResult",
                                 *kept]) + "\n")
    command = _sed().replace("sed -E -i", "sed -E")
    script = re.search(r"'(.+)'$", command)
    assert script is not None
    out = subprocess.run(["sed", "-E", script[1], str(source)], capture_output=True,
                         text=True, check=True).stdout.splitlines()
    assert out[:len(promised)] == [f"from {ours} import x" for _, ours in _table()]
    assert out[len(promised)] == "    from celery_plus.result import AsyncResult"
    assert out[len(promised) + 1:] == kept
    for line in out[:len(promised)]:
        importlib.import_module(line.split()[1])


def test_the_sed_keeps_every_other_top_level_celery_import_working(tmp_path: Path) -> None:
    """``from celery import <submodule or version name>`` swapped is Celery's own object
    under celery_plus; ``from celery import beat`` (celery_plus.beat is celery-plus's own
    scheduler module) is left as it is."""
    if shutil.which("sed") is None:
        pytest.skip("no sed")
    import celery

    names = ["bootsteps", "platforms", "loaders", "events", "concurrency", "backends",
             "local", "VERSION", "version_info"]
    lines = [f"from celery import {name}" for name in names]
    kept = ["from celery import beat", "from celery import Celery, beat"]
    source = tmp_path / "proj.py"
    source.write_text("\n".join([*lines, *kept]) + "\n")
    script = re.search(r"'(.+)'$", _sed())
    assert script is not None
    out = subprocess.run(["sed", "-E", script[1], str(source)], capture_output=True,
                         text=True, check=True).stdout.splitlines()
    assert out == [f"from celery_plus import {name}" for name in names] + kept
    import celery_plus

    for name in names:
        ours = getattr(celery_plus, name)
        theirs = getattr(celery, name, None) or importlib.import_module(f"celery.{name}")
        assert ours is theirs, name
    from celery_plus import beat as plus_beat

    assert plus_beat.__name__ == "celery_plus.beat"  # its own module, hence kept
