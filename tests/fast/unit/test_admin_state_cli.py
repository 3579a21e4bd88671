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


# -- workers by Celery name, with health ---------------------------------------------------
def test_workers_are_listed_by_node_name_with_health_from_the_store(store: Store) -> None:
    from celery_plus.admin.workers import health
    from celery_plus.model.store import WorkerBeat

    store.backend.worker_beat(WorkerBeat(node="w1@h1", host="h1", pid=4242,
                                         queues=("celery", "mail"), interval_ms=2000))
    store.job("held")
    [got] = store.backend.claim(["celery"], "h1:4242:abcd", 1).claims  # a lease of pid 4242
    assert got.job_id == "held"
    [view] = admin.list_workers(store.app)
    assert (view.node, view.host, view.pid, view.jobs, view.health) == (
        "w1@h1", "h1", 4242, 1, "alive")
    assert view.queues == ["celery", "mail"] and view.worker_ids == ["h1:4242:abcd"]
    assert view.answered is None  # nobody was asked: no broadcast
    result = run(store, "workers")
    assert result.exit_code == 0, result.output
    header, row = result.output.splitlines()
    assert header.split()[:3] == ["WORKER", "HEALTH", "HOST"]
    assert row.split()[:4] == ["w1@h1", "alive", "h1", "4242"] and "celery,mail" in row
    [data] = as_json(run(store, "workers", "--json"))
    assert (data["node"], data["health"], data["jobs"]) == ("w1@h1", "alive", 1)
    # health from the last beat and the worker's own interval
    assert [health(0, 2000, now) for now in (5000, 5001, 13000, 13001)] == [
        "alive", "late", "late", "gone"]


def test_a_worker_without_a_record_is_seen_by_its_leases(store: Store) -> None:
    store.job("held")
    store.backend.claim(["celery"], "h9:77:abcd", 1)
    [view] = admin.list_workers(store.app)
    assert (view.node, view.host, view.pid, view.jobs, view.health) == ("", "h9", 77, 1,
                                                                         "unknown")
