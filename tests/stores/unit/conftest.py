"""Fixtures shared by the admin's operator-feature tests (error groups, filter actions, the
per-task breakdown): ``store``, one empty store of each kind (SQLite, Redis, PostgreSQL), and
``web``, the dashboard over it. A module with a ``store`` or ``web`` of its own keeps it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from celery_plus.admin.web import Dashboard, make_app
from tests.fast.unit.test_admin_cli import Store
from tests.fast.unit.test_admin_web_security import security_store


@pytest.fixture(params=["sqlite", "redis", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    with security_store(request.param, tmp_path) as made:
        yield made


@pytest.fixture
def web(store: Store) -> Iterator[Dashboard]:
    dashboard = make_app(store.app)
    yield dashboard
    dashboard.close()
