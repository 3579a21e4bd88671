"""Client-side scenarios: code that uses proj the way an application does.

Each scenario calls tasks, waits for what it started and returns what it *observed* (results,
states, recorded side effects, replies), normalised so that two deployments can be compared:
no task ids, hostnames, timestamps or deployment prefixes. See :mod:`scenarios.support`.
"""

from scenarios import (  # noqa: F401  (registration)
    basics,
    beat,
    canvas,
    control,
    django_project,
    retries,
    timing,
)
from scenarios.support import SCENARIOS, Context, Scenario

__all__ = ["SCENARIOS", "Context", "Scenario"]
