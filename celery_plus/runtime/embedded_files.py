"""Which embedded file the workers of each app serve, so that a process publishing into
another one is told (issue #30, point 6).

With no broker configured, each process uses ``./.celery-plus/<app name>.db`` under *its own*
working directory: a web process started in one directory and a worker in another use two
files, and the jobs never run. Where it can be seen — the same user on the same host — it is
said: a worker on the embedded default records its file under its app's name in a small JSON
file of the user's runtime directory; a process that chooses the embedded default compares its
file with the one recorded for its app and, if a worker still running serves another one,
logs a WARNING naming both.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from pathlib import Path


def registry() -> Path:
    """The folder of the records (per user; the runtime directory when there is one)."""
    base = os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir()
    return Path(base) / f"celery-plus-{os.getuid()}" / "embedded"


def _record_of(app_name: str) -> Path:
    return registry() / (re.sub(r"[^A-Za-z0-9_.-]", "_", app_name or "__main__") + ".json")


def record_worker(app_name: str, path: Path) -> None:
    """This process is a worker of ``app_name`` serving the embedded file ``path``."""
    record = _record_of(app_name)
    with contextlib.suppress(OSError):
        record.parent.mkdir(parents=True, exist_ok=True)
        temporary = record.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(json.dumps({"path": str(path.resolve()), "pid": os.getpid()}))
        temporary.replace(record)


def worker_file_elsewhere(app_name: str, path: Path) -> str | None:
    """The embedded file a running worker of ``app_name`` on this host serves, if it is not
    ``path`` (None: none recorded, the same file, or its worker is gone)."""
    try:
        recorded = json.loads(_record_of(app_name).read_text())
        other, pid = str(recorded["path"]), int(recorded["pid"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if other == str(path.resolve()) or pid == os.getpid() or not _running(pid):
        return None
    return other


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


__all__ = ["record_worker", "registry", "worker_file_elsewhere"]
