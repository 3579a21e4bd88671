"""End-to-end: transactional enqueue on a ``plus+postgresql://`` broker, with a real worker.

Covers the acceptance line "1,000 transactions, half rolled back, each enqueueing one unique
job: exactly the committed half run on a real worker; no holds leak" (``enqueue_in``: the job
is written in the caller's transaction), and the after-commit form on a psycopg connection
(``enqueue_after_commit``: published once the transaction committed, dropped on rollback).

This module brings its own broker (a schema of the test database named after the test's
prefix, dropped afterwards) instead of the per-store parametrization of conftest.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest

from celery_plus import enqueue_after_commit, enqueue_in
from celery_plus.stores.postgres.backend import PostgresBackend
from tests.fast.conformance.stores import PG_URL
from tests.inspectors import inspector_for
from tests.support import drop_pg_schema

from . import proj
from .conftest import Worker, wait_until


@pytest.fixture
def broker_url(prefix: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A plus+postgresql:// broker on the test's own schema (workers and client use it)."""
    url = f"plus+{PG_URL}"
    monkeypatch.setenv("PLUS_TEST_BROKER", url)
    yield url
    drop_pg_schema(PG_URL, proj.pg_schema(prefix))


@pytest.fixture
def pg_view(prefix: str, broker_url: str) -> Iterator[PostgresBackend]:
    """The test's store (creates its schema), for assertions on jobs and holds."""
    backend = PostgresBackend(PG_URL, schema=proj.pg_schema(prefix))
    yield backend
    backend.close()


@pytest.fixture
def app_conn(pg_view: PostgresBackend) -> Iterator[psycopg.Connection[Any]]:
    """The application's own connection (autocommit off), with an ``orders`` table."""
    with psycopg.connect(PG_URL) as conn:
        conn.execute(f"SET search_path TO {pg_view.qschema}")
        conn.execute("CREATE TABLE orders (n integer PRIMARY KEY)")
        conn.commit()
        yield conn


def tx_keys(prefix: str) -> list[str]:
    return [e["key"] for e in proj.events(prefix, "tx")]


def test_only_committed_transactions_enqueue_and_no_hold_leaks(
        prefix: str, client: Any, start_worker: Callable[..., Worker],
        pg_view: PostgresBackend, app_conn: psycopg.Connection[Any]) -> None:
    worker = start_worker()
    task = client.tasks["proj.tx_mark"]
    for n in range(1000):
        with app_conn.transaction() as tx, enqueue_in(app_conn):
            app_conn.execute("INSERT INTO orders (n) VALUES (%s)", [n])
            result = task.delay(f"k{n}")
            assert result.deduplicated is False
            if n % 2:
                raise psycopg.Rollback(tx)
    committed = {f"k{n}" for n in range(0, 1000, 2)}
    wait_until(lambda: len(tx_keys(prefix)) >= 500, timeout=90, message="500 jobs run")
    wait_until(lambda: len(inspector_for(pg_view).ids_in_state("completed")) == 500, timeout=30,
               message="500 completed records")
    keys = tx_keys(prefix)
    assert sorted(keys) == sorted(committed), "a rolled-back job ran, or one ran twice"
    assert app_conn.execute("SELECT count(*) FROM orders").fetchone() == (500,)
    app_conn.commit()
    for state in ("enqueued", "scheduled", "blocked", "running", "failed"):
        assert inspector_for(pg_view).ids_in_state(state) == [], state
    assert inspector_for(pg_view).holds() == {}, "a unique hold leaked"
    assert pg_view.stats().get("deduplicated") is None
    assert " ERROR" not in worker.log()


def test_a_rolled_back_key_is_free_and_a_committed_one_is_held(
        prefix: str, client: Any, start_worker: Callable[..., Worker],
        pg_view: PostgresBackend, app_conn: psycopg.Connection[Any]) -> None:
    task = client.tasks["proj.tx_mark"]
    with app_conn.transaction() as tx, enqueue_in(app_conn):
        first = task.delay("same")
        raise psycopg.Rollback(tx)
    assert inspector_for(pg_view).job(first.id) is None and inspector_for(pg_view).holds() == {}
    with app_conn.transaction(), enqueue_in(app_conn):
        second = task.delay("same")
        assert second.deduplicated is False
    # Outside any transaction now: the committed job holds the key (nothing runs it yet).
    dup = task.delay("same")
    assert dup.deduplicated is True and dup.id == second.id
    start_worker()
    wait_until(lambda: tx_keys(prefix) == ["same"], timeout=30, message="the job ran")
    wait_until(lambda: inspector_for(pg_view).holds() == {}, timeout=30, message="hold released")


def test_enqueue_after_commit_on_a_psycopg_connection(
        prefix: str, client: Any, start_worker: Callable[..., Worker],
        pg_view: PostgresBackend, app_conn: psycopg.Connection[Any]) -> None:
    start_worker()
    task = client.tasks["proj.tx_mark"]
    for n in range(20):
        with enqueue_after_commit(app_conn), app_conn.transaction() as tx:
            app_conn.execute("INSERT INTO orders (n) VALUES (%s)", [n])
            result = task.delay(f"a{n}")
            assert result.deduplicated is None, "published before the commit"
            assert inspector_for(pg_view).job(result.id) is None
            if n % 2:
                raise psycopg.Rollback(tx)
        assert (result.deduplicated is False) == (n % 2 == 0)
    wait_until(lambda: len(tx_keys(prefix)) >= 10, timeout=30, message="10 jobs run")
    wait_until(lambda: len(inspector_for(pg_view).ids_in_state("completed")) == 10, timeout=30,
               message="10 completed")
    assert sorted(tx_keys(prefix)) == sorted(f"a{n}" for n in range(0, 20, 2))
