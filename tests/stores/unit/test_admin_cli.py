"""The same cases as ``tests/fast/unit/test_admin_cli.py``, on Redis."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fast.unit.test_admin_cli import *  # noqa: F403
from tests.fast.unit.test_admin_cli import Store, admin_store
from tests.support import keep_tests_using

keep_tests_using(globals(), "store", "web")


@pytest.fixture(params=["redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    with admin_store(request.param, tmp_path) as made:
        yield made
