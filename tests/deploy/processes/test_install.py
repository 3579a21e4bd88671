"""The package runs with its declared dependencies only (README, first command).

The test extra brings libraries of its own (pytest needs ``packaging``, for one), which can
hide a dependency the package uses but does not declare: kombu's Redis transport imports
``packaging`` without declaring it, and ``celery-plus`` failed to start in a virtualenv with
nothing but celery-plus installed. This installs the checkout into a fresh virtualenv, without
extras, and starts the CLI.
"""

from __future__ import annotations

import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_the_cli_starts_with_only_the_declared_dependencies(tmp_path: Path) -> None:
    env_dir = tmp_path / "venv"
    # No pip of its own: this session's pip installs into it (``--python``), which spares
    # the test the ten seconds of ensurepip; what gets installed is the same.
    venv.create(env_dir)
    python = env_dir / "bin" / "python"
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                              "-q", "-e", str(ROOT)],
                             capture_output=True, text=True, timeout=300)
    assert install.returncode == 0, install.stdout + install.stderr
    extras = subprocess.run([str(python), "-c", "import pytest"], capture_output=True)
    assert extras.returncode != 0, "the test extra leaked into the bare install"
    for args in (["--help"], ["migrate-queue", "--help"], ["demo", "--help"]):
        started = subprocess.run([str(env_dir / "bin" / "celery-plus"), *args],
                                 capture_output=True, text=True, timeout=60)
        assert started.returncode == 0, (args, started.stdout + started.stderr)
    imported = subprocess.run(
        [str(python), "-c", "import celery_plus, celery_plus.cli, celery_plus.admin.web, "
         "celery_plus.queue_migration.migrate, celery_plus.transport.legacy"],
        capture_output=True, text=True, timeout=60)
    assert imported.returncode == 0, imported.stderr
