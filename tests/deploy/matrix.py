"""Which variants of a deploy test the README's suite runs, and which wait for the long run.

A deploy test runs real worker processes, seconds per variant, and most run once per store
(e2e: ``broker_kind``; faults: ``store``) and some once per pool too. The README's suite runs
each test, and each pool of it, on **one** of its stores: :func:`chosen` rotates over the test's
stores by the test's name, so the suite as a whole runs every store. The stores themselves are
proven case by case on every store by the conformance and channel suites (``tests/stores``).
Tests marked ``long`` (minutes each: Celery's own ``t/integration``, the compatibility
suite's pool and Django dimensions, the fault suite's long variants) wait for the long run.

``tests/run_long.sh`` sets ``PLUS_FULL_MATRIX=1`` (every variant) and ``PLUS_LONG=1`` (the
``long`` tests); its figures are in docs/tests.md. A test named on the command line
(``path::test`` or ``path::test[variant]``) runs in any case.
"""

from __future__ import annotations

import os
import zlib
from collections import defaultdict
from collections.abc import Callable
from typing import Any, TypeVar

import pytest

F = TypeVar("F", bound=Callable[..., object])

#: Set to "1" to run every store and pool variant of every deploy test.
FULL_MATRIX_ENV = "PLUS_FULL_MATRIX"
#: Set to "1" to run the tests marked ``long``.
LONG_ENV = "PLUS_LONG"
#: The parameters that name a test's store (``deployment``: the browser operator features'
#: module-wide deployment, one per store).
STORE_PARAMS = ("broker_kind", "store", "deployment")


def pools(*names: str) -> Callable[[F], F]:
    """Parametrize a test's ``pool`` over ``names`` (each pool runs on one store in the
    README's suite, on every store in the long run)."""
    return pytest.mark.parametrize("pool", names)


def select(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect what the README's suite leaves to the long run."""
    full = os.environ.get(FULL_MATRIX_ENV) == "1"
    long = os.environ.get(LONG_ENV) == "1"
    if full and long:
        return
    keep = set(items) if full else _one_store_each(items)
    named = _named(config)
    kept = [i for i in items if _is_named(i, named)
            or (i in keep and (long or i.get_closest_marker("long") is None))]
    if len(kept) < len(items):
        chosen_items = set(kept)
        config.hook.pytest_deselected(items=[i for i in items if i not in chosen_items])
        items[:] = kept


def _named(config: pytest.Config) -> list[str]:
    """The test ids named on the command line (``path::test[...]``), relative to the root:
    a test asked for by name runs whatever this module would choose."""
    named = []
    for arg in config.args:
        path, sep, rest = arg.partition("::")
        if sep:
            named.append(f"{os.path.relpath(os.path.abspath(path), config.rootpath)}::{rest}")
    return named


def _is_named(item: pytest.Item, named: list[str]) -> bool:
    return any(item.nodeid == n or item.nodeid.startswith((f"{n}[", f"{n}::")) for n in named)


def chosen(name: str, stores: list[str]) -> str:
    """The store the README's suite runs a test variant called ``name`` on."""
    return stores[zlib.crc32(name.encode()) % len(stores)]


def _one_store_each(items: list[pytest.Item]) -> set[pytest.Item]:
    """Per test and its parameters other than the store: the variant on the chosen store."""
    groups: dict[tuple[Any, ...], list[tuple[str, pytest.Item]]] = defaultdict(list)
    keep: set[pytest.Item] = set()
    for item in items:
        params = dict(getattr(getattr(item, "callspec", None), "params", {}))
        store_param = next((p for p in STORE_PARAMS if p in params), None)
        if store_param is None or not item.nodeid.startswith("tests/deploy/"):
            keep.add(item)
            continue
        store = str(params.pop(store_param))
        # a module-wide deployment (the browser operator features': a module-scoped fixture,
        # so every test of the module has the same stores): one store for the whole module, so
        # the README's suite starts one deployment, not one per store
        test = (item.nodeid.split("::")[0] if store_param == "deployment"
                else getattr(item, "originalname", item.name))
        name = f"{test}[{_ids(params)}]"
        groups[(item.nodeid.split("::")[0], name)].append((store, item))
    for (_, name), variants in groups.items():
        store = chosen(name, list(dict.fromkeys(s for s, _ in variants)))
        keep.update(item for s, item in variants if s == store)
    return keep


def _ids(params: dict[str, Any]) -> str:
    return "-".join(f"{key}={params[key]}" for key in sorted(params))
