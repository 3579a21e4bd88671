"""The same cases as ``tests/fast/unit/test_admin_state_cli.py``, on Redis and PostgreSQL."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fast.unit.test_admin_cli import Store
from tests.fast.unit.test_admin_state_cli import *  # noqa: F403
from tests.fast.unit.test_admin_state_cli import state_store
from tests.support import keep_tests_using

keep_tests_using(globals(), "store")


@pytest.fixture(params=["redis", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    with state_store(request.param, tmp_path) as made:
        yield made
