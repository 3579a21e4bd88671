"""The same cases as ``tests/fast/unit/test_admin_queue_history.py``, on Redis and PostgreSQL."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.fast.unit.test_admin_cli import Store
from tests.fast.unit.test_admin_queue_history import *  # noqa: F403
from tests.fast.unit.test_admin_web_security import security_store
from tests.support import keep_tests_using

keep_tests_using(globals(), "store")


@pytest.fixture(params=["redis", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    with security_store(request.param, tmp_path) as made:
        yield made
