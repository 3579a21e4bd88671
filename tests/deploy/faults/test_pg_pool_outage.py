"""PostgreSQL store calls never wait for a pool that cannot connect (issue 11).

All the backends of a process share one connection pool per store (``pool.py``). When the
server goes away, the first backend to see its connection fail retires that pool and moves to
a fresh one; the other backends must move too, not wait in the old pool for a connection its
worker makes only on its own backoff (1, 2, 4… s, up to the pool's 30 s timeout). A lease
keeper waiting so let the leases of a live worker lapse after a 4 s outage, and another worker
ran its jobs again (``test_store_outage_mid_drain[postgres]`` failed so in CI). The same holds
for a pool that found its connections broken by itself (``pool.check()``, as a pool replacing
an old connection does).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator

import pytest

from celery_plus.stores.postgres import pool as pg_pool
from celery_plus.stores.postgres.backend import PostgresBackend, StoreUnavailable
from tests.support import wait_until

from .servers import PostgresCluster

#: A call during the outage must fail well before the pool's own timeout would end it.
QUICK_S = pg_pool.POOL_TIMEOUT / 3


@pytest.fixture
def backends(pg_cluster: PostgresCluster) -> Iterator[tuple[PostgresBackend, PostgresBackend]]:
    schema = f"pp{uuid.uuid4().hex[:10]}"
    first, second = PostgresBackend(pg_cluster.url, schema=schema), PostgresBackend(
        pg_cluster.url, schema=schema)
    yield first, second
    first.close()
    second.close()


def outcome_within(call: Callable[[], object], seconds: float) -> BaseException | str:
    """What ``call`` raised (or "ok"), asserting it returned within ``seconds``."""
    result: list[BaseException | str] = []

    def run() -> None:
        try:
            call()
            result.append("ok")
        except BaseException as exc:
            result.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert result, f"the store call still runs after {seconds}s (in an old pool, or again)"
    return result[0]


def test_a_backend_sharing_a_failed_pool_fails_fast_and_recovers_at_once(
        pg_cluster: PostgresCluster, backends: tuple[PostgresBackend, PostgresBackend]) -> None:
    first, second = backends
    first.size("q")
    second.size("q")
    assert first._current_engine() is second._current_engine()
    pg_cluster.stop()
    try:
        with pytest.raises(StoreUnavailable):
            first.size("q")  # retires the shared pool
        assert isinstance(outcome_within(lambda: second.size("q"), QUICK_S), StoreUnavailable)
    finally:
        pg_cluster.start()
    assert outcome_within(lambda: second.size("q"), QUICK_S) == "ok"
    assert outcome_within(lambda: first.size("q"), QUICK_S) == "ok"


def test_a_pool_that_cannot_reconnect_by_itself_is_retired(
        pg_cluster: PostgresCluster, backends: tuple[PostgresBackend, PostgresBackend]) -> None:
    first, _ = backends
    first.size("q")
    engine = first._current_engine()
    pg_cluster.stop()
    try:
        engine.pool.check()  # finds its connections broken and starts reconnecting
        assert isinstance(outcome_within(lambda: first.size("q"), QUICK_S), StoreUnavailable)
    finally:
        pg_cluster.start()
    assert outcome_within(lambda: first.size("q"), QUICK_S) == "ok"
    assert first._current_engine() is not engine


def test_a_cancelled_statement_leaves_the_shared_pool_alone(
        pg_cluster: PostgresCluster, backends: tuple[PostgresBackend, PostgresBackend]) -> None:
    """A statement that fails on a live session (cancelled here) is no lost connection: it is
    not run again, and the pool the process shares stays open."""
    import psycopg

    first, second = backends
    first.size("q")
    engine = first._current_engine()
    marker = f"cancelled-{uuid.uuid4().hex}"
    statement = f"SELECT pg_sleep(30) -- {marker}"
    cancels = 0

    def cancel() -> None:
        nonlocal cancels
        with psycopg.connect(pg_cluster.url, autocommit=True) as conn:
            def cancelled() -> bool:
                return bool(conn.execute(
                    "SELECT count(pg_cancel_backend(pid)) FROM pg_stat_activity "
                    "WHERE query = %s", [statement]).fetchone()[0])
            wait_until(cancelled, timeout=10, message="the statement to cancel runs")
            cancels += 1

    canceller = threading.Thread(target=cancel, daemon=True)
    canceller.start()
    outcome = outcome_within(lambda: first._rows(statement), QUICK_S)  # not run again
    canceller.join()
    assert cancels == 1
    assert isinstance(outcome, StoreUnavailable)
    assert "canceling statement" in str(outcome)
    assert not engine.retired and not engine.pool.closed
    assert second._current_engine() is engine
    assert outcome_within(lambda: second.size("q"), QUICK_S) == "ok"


def test_a_late_failure_on_a_replaced_pool_leaves_the_fresh_one_open(
        backends: tuple[PostgresBackend, PostgresBackend]) -> None:
    """Threads share a backend (the group commit's publishers do): one whose call failed on
    the old pool after another thread already moved the backend to a fresh one must retire
    the old pool only (retiring the fresh one closed it under every caller, who then ran out
    of attempts: CI failed so once, the group commit's terminated-session test)."""
    backend, _ = backends
    old = backend._current_engine()
    backend._renew_pool()  # this thread's call failed on it first
    fresh = backend._current_engine()
    assert fresh is not old and old.retired
    renew_late = threading.Thread(target=lambda: (  # a call of another thread, on ``old``
        setattr(backend._tls, "engine", old), backend._renew_pool()))
    renew_late.start()
    renew_late.join()
    assert not fresh.retired and backend._current_engine() is fresh
    assert outcome_within(lambda: backend.size("q"), QUICK_S) == "ok"
