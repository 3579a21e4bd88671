"""A request's deadline stops its store queries (``celery_plus/admin/deadline.py``): on SQLite
the progress handler interrupts the running statement once the request is past its deadline
or its client has gone, and the dashboard answers 503 saying so."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from celery_plus.admin import deadline
from celery_plus.admin.web import Dashboard, make_app
from tests.fast.unit.test_admin_cli import Store
from tests.fast.unit.test_admin_web_security import OPERATOR, security_store
from tests.stores.unit.test_admin_web import call

SEARCH = "text=nowhere&search=all"


@pytest.fixture
def web(tmp_path: Path) -> Iterator[tuple[Store, Dashboard]]:
    with security_store("sqlite", tmp_path) as store:
        for n in range(300):
            store.dead(f"d{n}", args=["x" * 500])
        dashboard = make_app(store.app)
        yield store, dashboard
        dashboard.close()


def test_a_search_whose_client_left_is_stopped(web: tuple[Store, Dashboard]) -> None:
    _, dashboard = web
    status, _, _ = call(dashboard, "/jobs/failed", query=SEARCH, headers=OPERATOR)
    assert status == "200 OK"
    looked: list[int] = []

    def gone() -> bool:  # the client leaves once the search has started
        looked.append(1)
        return True

    status, headers, text = call(dashboard, "/jobs/failed", query=SEARCH, headers={
        **OPERATOR, "waitress.client_disconnected": gone})  # type: ignore[dict-item]
    assert status == "503 Service Unavailable", text
    assert text.startswith("stopped: the client left (closed the connection); narrow"), text
    assert looked and headers["Retry-After"]
    # the store's connection is fine afterwards
    assert call(dashboard, "/failed", headers=OPERATOR)[0] == "200 OK"


def test_a_request_past_its_deadline_is_stopped(web: tuple[Store, Dashboard]) -> None:
    _, dashboard = web
    dashboard.request_deadline = 0.0
    status, _, text = call(dashboard, "/jobs/failed", query=SEARCH, headers=OPERATOR)
    assert status == "503 Service Unavailable", text
    assert text.startswith("stopped: the request's deadline of 0 s passed"), text
    assert deadline.Deadline(0.0, None, 12.5).reason() == (
        "the request's deadline of 12 s passed")  # (whole seconds from 10 s up)
    assert deadline.Deadline(0.0, None, 0.5).reason() == "the request's deadline of 0.5 s passed"
    dashboard.request_deadline = deadline.REQUEST_DEADLINE
    assert call(dashboard, "/jobs/failed", query=SEARCH, headers=OPERATOR)[0] == "200 OK"


def test_postgres_statements_get_the_deadline_through_pgoptions(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PGOPTIONS", "-c work_mem=8MB")
    deadline.postgres_options(12.5)
    assert os.environ["PGOPTIONS"] == "-c work_mem=8MB -c statement_timeout=12500"
    monkeypatch.setenv("PGOPTIONS", "-c statement_timeout=5s")
    deadline.postgres_options()
    assert os.environ["PGOPTIONS"] == "-c statement_timeout=5s"  # (the user's is kept)
