"""Where celery-plus is meant to behave differently from plain Celery, and known gaps.

Each entry is explained at length in docs/compat.md ("Intentional differences"); keep the two
in step.
"""

from __future__ import annotations

_PURGE_TAKES_SCHEDULED = (
    "purge removes waiting jobs, and in celery-plus a job waiting for its ETA is one of them "
    "(docs/decisions.md, 'Purge removes what no worker holds'); plain Celery's worker already "
    "holds it in memory, out of purge's reach, and runs it"
)

#: (scenario, outcome path) -> why celery-plus differs there on purpose. A path covers its
#: sub-paths (``a`` covers ``a.b`` and ``a[0]``).
INTENTIONAL: dict[tuple[str, str], str] = {
    ("eta_waits_and_purge", "purged"): _PURGE_TAKES_SCHEDULED,
    ("eta_waits_and_purge", "ran"): _PURGE_TAKES_SCHEDULED,
    ("eta_waits_and_purge", "state"): _PURGE_TAKES_SCHEDULED,
}

#: (scenario, configuration) -> a real incompatibility not fixed yet: the cell is reported
#: as ``xfail`` while it still shows, and as ``xpass`` (a failure) once it is gone.
EXPECTED_FAILURES: dict[tuple[str, str], str] = {}
