"""Tests run on several pools and every store, thinned in the README's suite.

``@pools("prefork", "solo", "threads")`` parametrizes a test's ``pool``; the e2e conftest
parametrizes its store (``broker_kind``). The full matrix of a three-pool test is nine worker
runs of about ten seconds each, so the README's suite keeps the pairs :func:`in_readme_run`
chooses — every store and every pool at least once, the first pool listed on every store —
and ``PLUS_E2E_ALL=1`` runs every pair (docs/reliability.md, "Test matrix").
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import TypeVar

import pytest

F = TypeVar("F", bound=Callable[..., object])

#: The durable stores, in the order the e2e conftest parametrizes them.
STORES = ("redis", "sqlite", "postgres")
#: Set to "1" to run every pool on every store.
ALL_ENV = "PLUS_E2E_ALL"


def pools(*names: str) -> Callable[[F], F]:
    """Parametrize the test's ``pool`` over ``names``, marked for the README-run thinning."""
    def mark(test: F) -> F:
        return pytest.mark.pool_matrix(names)(pytest.mark.parametrize("pool", names)(test))
    return mark


def in_readme_run(store: str, pool: str, names: Sequence[str]) -> bool:
    """Whether the README's suite runs ``pool`` on ``store`` for a test over ``names``.

    The first pool listed (prefork, Celery's default, where it applies; else the pool the test
    is about) runs on every store; each other pool on one store, in turn from the second store.
    """
    if pool == names[0]:
        return True
    return names.index(pool) % len(STORES) == STORES.index(store)


def thin(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the pairs the README's suite does not run (unless ``PLUS_E2E_ALL=1``)."""
    if os.environ.get(ALL_ENV) == "1":
        return
    kept, dropped = [], []
    for item in items:
        (kept if _runs(item) else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def _runs(item: pytest.Item) -> bool:
    marker = item.get_closest_marker("pool_matrix")
    params = getattr(getattr(item, "callspec", None), "params", {})
    if marker is None or "broker_kind" not in params:
        return True
    return in_readme_run(params["broker_kind"], params["pool"], marker.args[0])
