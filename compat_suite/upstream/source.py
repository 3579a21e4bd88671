"""Celery's integration suite for the installed Celery version: fetched once, then cached.

The suite ships in Celery's sdist (``t/integration``), not in the wheel. ``suite_source()``
downloads the sdist with pip (``pip download --no-binary :all: --no-deps celery==<version>``),
unpacks its ``t/`` tree and ``pyproject.toml`` into the cache, and returns that directory.
Nothing under it is ever changed: every run copies ``t/`` into a workspace of its own.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from importlib import metadata
from pathlib import Path

#: Where unpacked suites are kept (``$CELERY_PLUS_UPSTREAM_CACHE`` overrides it).
DEFAULT_CACHE = Path.home() / ".cache" / "celery-plus" / "upstream"


def installed_celery() -> str:
    """The version of the Celery this interpreter imports."""
    return metadata.version("celery")


def cache_dir() -> Path:
    return Path(os.environ.get("CELERY_PLUS_UPSTREAM_CACHE") or DEFAULT_CACHE)


def suite_source(version: str | None = None, cache: Path | None = None) -> Path:
    """The unpacked sdist of Celery ``version`` (default: installed), ``t/`` and config only."""
    version = version or installed_celery()
    root = (cache or cache_dir()) / f"celery-{version}"
    if (root / "t" / "integration" / "conftest.py").is_file():
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root.parent) as tmp:
        sdist = _download(version, Path(tmp))
        staging = Path(tmp) / "unpacked"
        _unpack_suite(sdist, staging, f"celery-{version}")
        if root.exists():  # a half-written tree from an interrupted run
            shutil.rmtree(root)
        (staging / f"celery-{version}").rename(root)
    return root


def _download(version: str, into: Path) -> Path:
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-binary", ":all:",
               "--no-deps", "-d", str(into), f"celery=={version}"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    found = sorted(into.glob(f"celery-{version}.tar.gz"))
    if done.returncode != 0 or not found:
        raise RuntimeError(f"could not download the Celery {version} sdist "
                           f"({' '.join(command)}):\n{done.stdout}{done.stderr}")
    return found[0]


def _unpack_suite(sdist: Path, into: Path, top: str) -> None:
    """Extract ``<top>/t/**`` and ``<top>/pyproject.toml`` (nothing else, nothing outside)."""
    with tarfile.open(sdist) as archive:
        members = [m for m in archive.getmembers()
                   if m.name == f"{top}/pyproject.toml" or m.name.startswith(f"{top}/t/")]
        archive.extractall(into, members=members, filter="data")
