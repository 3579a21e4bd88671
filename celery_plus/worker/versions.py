"""The Celery and billiard versions whose private parts celery-plus's worker patches were
checked against, in one place, and the start-up check that refuses any other.

Each patch below replaces or wraps something Celery or billiard does not promise to keep
(a private attribute, an undocumented method). On a version outside the checked range it
could misbehave silently, so :func:`check_versions` (run as a worker starts, by the
``DurableSetup`` bootstep) refuses it
with an error naming the package, the version found and the range to install;
``CELERY_PLUS_UNCHECKED_VERSIONS=1`` lets a user who has checked them run anyway.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from importlib import metadata

from celery.exceptions import ImproperlyConfigured
from packaging.version import Version


@dataclass(frozen=True)
class Checked:
    """A package's versions a patch was checked against: ``low <= version < high``."""

    package: str
    low: str
    high: str

    def holds(self, version: str) -> bool:
        return Version(self.low) <= Version(version) < Version(self.high)


CELERY = Checked("celery", "5.7", "5.8")
BILLIARD = Checked("billiard", "4.3.2", "4.4")

#: Every patch of a private part of Celery or billiard: where it is, what it touches, and
#: the versions it was checked against.
PATCHES: tuple[tuple[str, str, Checked], ...] = (
    ("worker/pool_guards.py", "AsynPool.flush (keeps the jobs handed to processes)", BILLIARD),
    ("worker/pool_guards.py", "AsynPool.on_partial_read (reads a dead process's acks first)",
     CELERY),
    ("worker/pool_guards.py", "BasePool.on_apply (SystemExit in solo/threads/green pools)",
     CELERY),
    ("worker/prefork_gate.py", "celery.concurrency.prefork.TaskPool (non-blocking hand-off)",
     CELERY),
    ("worker/control.py", "celery.worker.control.Panel.data['scheduled']", CELERY),
    ("worker/thaw_guard.py", "a prefork pool process's SIGCONT and HOLD_SIGNAL handler "
     "(billiard.common.terminate_handler_fired)", BILLIARD),
)

#: Set to 1 to run on versions outside the checked ranges anyway.
OPT_OUT = "CELERY_PLUS_UNCHECKED_VERSIONS"


def check_versions(found: dict[str, str] | None = None) -> None:
    """Refuse a Celery or billiard outside the versions every patch was checked against."""
    if os.environ.get(OPT_OUT) == "1":
        return
    for checked in {checked for _, _, checked in PATCHES}:
        version = (found or {}).get(checked.package) or metadata.version(checked.package)
        if not checked.holds(version):
            touched = "; ".join(f"{what} ({where})" for where, what, c in PATCHES
                                if c == checked)
            raise ImproperlyConfigured(
                f"celery-plus patches private parts of {checked.package} that were checked "
                f"against {checked.package}>={checked.low},<{checked.high} only, and "
                f"{checked.package} {version} is installed: {touched}. Install "
                f"'{checked.package}>={checked.low},<{checked.high}', or set {OPT_OUT}=1 to "
                "run unchecked.")


__all__ = ["BILLIARD", "CELERY", "PATCHES", "Checked", "check_versions"]
