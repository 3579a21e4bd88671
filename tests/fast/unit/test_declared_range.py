"""The declared range is the tested one (issue 30, point 9): pyproject.toml's floors of Celery,
kombu and billiard are the versions installed here (the ones every test and figure is
measured on), Celery and kombu capped below the next minor; the ``redis`` client is capped
exactly as the installed kombu's own ``redis`` extra caps it; and the worker's patch check
(``worker/versions.py``) names the same range. A change of any side fails here, not in a
user's pip resolution. Reads pyproject.toml and the installed metadata; no server."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from celery_plus.worker.versions import BILLIARD, CELERY, Checked

tomllib = pytest.importorskip("tomllib")  # Python 3.11+

PYPROJECT = Path(__file__).resolve().parents[3] / "pyproject.toml"


def declared() -> dict[str, SpecifierSet]:
    """pyproject.toml's runtime requirements, by package name."""
    project = tomllib.loads(PYPROJECT.read_text())["project"]
    requirements = [Requirement(line) for line in project["dependencies"]]
    return {r.name.lower(): r.specifier for r in requirements}


def bounds(spec: SpecifierSet) -> tuple[Version, Version]:
    """(floor, cap) of a ``>=floor,<cap`` specifier; fails on any other shape."""
    ops = {s.operator: Version(s.version) for s in spec}
    assert set(ops) == {">=", "<"}, f"{spec}: declare a floor and a cap"
    return ops[">="], ops["<"]


@pytest.mark.parametrize("package", ["celery", "kombu"])
def test_the_floor_is_the_installed_minor_and_the_cap_the_next(package: str) -> None:
    floor, cap = bounds(declared()[package])
    installed = Version(metadata.version(package))
    assert floor.release[:2] == installed.release[:2], (
        f"{package}: declared >={floor}, tested on {installed}")
    assert floor <= installed < cap
    assert cap == Version(f"{installed.major}.{installed.minor + 1}")


def test_billiard_floor_is_the_one_the_installed_celery_needs() -> None:
    floor, cap = bounds(declared()["billiard"])
    needed = next(Requirement(r) for r in metadata.requires("celery") or []
                  if Requirement(r).name == "billiard" and Requirement(r).marker is None)
    assert SpecifierSet(f">={floor}") == needed.specifier
    assert floor <= Version(metadata.version("billiard")) < cap


def test_redis_is_capped_as_the_installed_kombu_caps_it() -> None:
    kombu_redis = [Requirement(r) for r in metadata.requires("kombu") or []
                   if Requirement(r).name == "redis"
                   and Requirement(r).marker is not None
                   and Requirement(r).marker.evaluate({"extra": "redis"})]
    assert len(kombu_redis) == 1, "kombu's redis extra names redis once"
    assert declared()["redis"] == kombu_redis[0].specifier, (
        f"declared redis{declared()['redis']}, kombu's redis extra: "
        f"redis{kombu_redis[0].specifier}")
    assert metadata.version("redis") in declared()["redis"]


@pytest.mark.parametrize("checked", [CELERY, BILLIARD], ids=lambda c: c.package)
def test_the_worker_checks_the_declared_range(checked: Checked) -> None:
    floor, cap = bounds(declared()[checked.package])
    assert (Version(checked.low), Version(checked.high)) == (floor, cap)


def test_celerys_own_suite_has_a_baseline_of_the_installed_celery() -> None:
    """``python -m compat_suite.upstream`` compares against a stored run of this Celery."""
    baselines = PYPROJECT.parent / "compat_suite" / "upstream" / "baselines"
    assert (baselines / f"celery-{metadata.version('celery')}.json").is_file()
