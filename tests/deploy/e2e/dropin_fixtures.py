"""Fixtures of the issue-12 drop-in tests: the client app of ``tests.deploy.e2e.dropin_proj``.

Import them into a test module (``from .dropin_fixtures import client``) to replace the
plain ``proj`` client of ``conftest.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from . import dropin_proj

APP = "tests.deploy.e2e.dropin_proj"


@pytest.fixture
def client(prefix: str, broker_url: str) -> Iterator[Any]:
    """A client of the drop-in project on the test's store and prefix."""
    app = dropin_proj.make_app(prefix)
    yield app
    app.close()
