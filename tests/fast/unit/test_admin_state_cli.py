"""The admin-state features from the command line and the Python API (issue 28; docs/admin.md
"Reserved and running"), through click's runner on a real store: here SQLite,
``tests/stores/unit/test_admin_state_cli.py`` runs the same cases on Redis and PostgreSQL.

A job its worker claimed but has not started (a heartbeat's ``NOT_STARTED`` start mark) is
listed and shown as ``reserved``, apart from the ones running.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from celery_plus import Celery, admin
from celery_plus.model.store import NOT_STARTED
from tests.fast.unit.test_admin_cli import REDIS_URL, Store, as_json, drop_store, run


@contextlib.contextmanager
def state_store(kind: str, tmp_path: Path) -> Iterator[Store]:
    """An app on a store of ``kind`` (sqlite, redis or postgres) with its admin's backend."""
    from tests.fast.conformance.stores import PG_URL

    prefix = f"s{uuid.uuid4().hex[:10]}"
    broker = {"sqlite": f"plus+sqlite:///{tmp_path / 'store.db'}",
              "redis": f"plus+{REDIS_URL}", "postgres": f"plus+{PG_URL}"}[kind]
    app = Celery("admin-state", broker=broker, set_as_current=False)
    app.conf.plus_key_prefix = prefix
    app.conf.plus_pg_schema = prefix
    a = admin.connect(app)
    try:
        yield Store(app, a.store.backend)  # type: ignore[attr-defined]
    finally:
        a.close()
        app.close()
        drop_store(kind, prefix)


@pytest.fixture(params=["sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    with state_store(request.param, tmp_path) as made:
        yield made


def _reserved_and_running(store: Store) -> None:
    """Job ``r`` claimed, not started (reserved); job ``s`` claimed and started."""
    store.job("r")
    store.job("s")
    got = {c.job_id: c for c in store.backend.claim(["celery"], "w1", 2).claims}
    store.backend.heartbeat([("r", got["r"].token), ("s", got["s"].token)], [NOT_STARTED, 0])


def test_the_api_tells_reserved_from_running(store: Store) -> None:
    _reserved_and_running(store)
    page = admin.jobs(store.app, "running")
    assert {r.id: r.reserved for r in page.items} == {"r": True, "s": False}
    assert admin.show(store.app, "r").summary.reserved
    assert not admin.show(store.app, "s").summary.reserved
    assert page.to_dict()["items"][0]["reserved"] in (True, False)


def test_jobs_running_lists_reserved_apart(store: Store) -> None:
    _reserved_and_running(store)
    result = run(store, "jobs", "running")
    assert result.exit_code == 0, result.output
    header, *lines = result.output.splitlines()
    assert header.split()[:5] == ["TASK", "ID", "TASK", "QUEUE", "STATE"]
    states = {line.split()[0]: line.split()[3] for line in lines if line[:1] in "rs"}
    assert states == {"r": "reserved", "s": "running"}
    data = as_json(run(store, "jobs", "running", "--json"))
    assert {i["id"]: i["reserved"] for i in data["items"]} == {"r": True, "s": False}


def test_dlq_show_names_a_reserved_job_reserved(store: Store) -> None:
    _reserved_and_running(store)
    shown = run(store, "dlq", "show", "r")
    assert shown.exit_code == 0, shown.output
    assert "State:        reserved" in shown.output
    assert "State:        running" in run(store, "dlq", "show", "s").output
