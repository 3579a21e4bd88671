"""``tests/deploy/matrix.py``: which variants of a deploy test the README's suite runs."""

from __future__ import annotations

import pytest

from tests.deploy import matrix

pytest_plugins = ["pytester"]

CONFTEST = """
from tests.deploy import matrix

def pytest_collection_modifyitems(config, items):
    matrix.select(config, items)
"""
MODULE = """
import pytest

@pytest.mark.parametrize("broker_kind", ["redis", "sqlite", "postgres"])
def test_scenario(broker_kind):
    pass

@pytest.mark.parametrize("pool", ["prefork", "solo", "threads"])
@pytest.mark.parametrize("store", ["redis", "sqlite", "postgres"])
def test_over_pools(store, pool):
    pass

@pytest.fixture(scope="module", params=["redis", "sqlite", "postgres"])
def deployment(request):
    return request.param

def test_feature_one(deployment):
    pass

def test_feature_two(deployment):
    pass

@pytest.mark.long
def test_minutes():
    pass

def test_plain():
    pass
"""


def _collected(pytester: pytest.Pytester, *args: str) -> list[str]:
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(**{"tests/deploy/test_module": MODULE})
    result = pytester.runpytest_inprocess("--collect-only", "-q", "-p", "no:cacheprovider",
                                          *args)
    return [line for line in result.outlines if "::" in line]


@pytest.fixture(autouse=True)
def _readme_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(matrix.FULL_MATRIX_ENV, raising=False)
    monkeypatch.delenv(matrix.LONG_ENV, raising=False)


def test_each_test_and_each_pool_runs_on_the_one_store_chosen_by_its_name(
        pytester: pytest.Pytester) -> None:
    ids = _collected(pytester)
    stores = ["redis", "sqlite", "postgres"]
    scenario = matrix.chosen("test_scenario[]", stores)
    assert [i for i in ids if "test_scenario" in i] == [
        f"tests/deploy/test_module.py::test_scenario[{scenario}]"]
    for pool in ("prefork", "solo", "threads"):
        store = matrix.chosen(f"test_over_pools[pool={pool}]", stores)
        assert [i for i in ids if f"-{pool}]" in i] == [
            f"tests/deploy/test_module.py::test_over_pools[{store}-{pool}]"]
    assert "tests/deploy/test_module.py::test_plain" in ids
    assert not any("test_minutes" in i for i in ids)


def test_the_long_run_runs_every_variant_and_the_long_tests(
        pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(matrix.FULL_MATRIX_ENV, "1")
    monkeypatch.setenv(matrix.LONG_ENV, "1")
    assert len(_collected(pytester)) == 3 + 9 + 3 + 3 + 1 + 1


def test_a_variant_named_on_the_command_line_runs_whatever_the_choice(
        pytester: pytest.Pytester) -> None:
    stores = ["redis", "sqlite", "postgres"]
    other = next(s for s in stores if s != matrix.chosen("test_scenario[]", stores))
    named = f"tests/deploy/test_module.py::test_scenario[{other}]"
    assert _collected(pytester, named, "tests/deploy/test_module.py::test_minutes") == [
        named, "tests/deploy/test_module.py::test_minutes"]


def test_the_choice_spreads_over_the_stores() -> None:
    stores = ["redis", "sqlite", "postgres"]
    picks = [matrix.chosen(f"test_{n}[]", stores) for n in range(300)]
    assert all(80 <= picks.count(s) <= 120 for s in stores), {s: picks.count(s) for s in stores}


def test_the_tests_of_a_module_wide_deployment_share_one_store(
        pytester: pytest.Pytester) -> None:
    """One deployment is started for the module (the browser operator features'), not one
    per store its tests were spread over."""
    ids = _collected(pytester)
    store = matrix.chosen("tests/deploy/test_module.py[]", ["redis", "sqlite", "postgres"])
    assert [i for i in ids if "test_feature" in i] == [
        f"tests/deploy/test_module.py::test_feature_one[{store}]",
        f"tests/deploy/test_module.py::test_feature_two[{store}]"]
