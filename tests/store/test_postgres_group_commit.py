"""Group commit of the PostgreSQL store (``pg_pool.GroupCommit``, issue #13): threads of one
process publishing at the same time share one transaction, each returns only once its own
job is committed, an error reaches only the caller whose job caused it, and a connection that
dies under a shared transaction loses nothing (the transaction runs again on a new one).

Concurrency is made, not hoped for: a second session holds a lock the first publish needs, so
the publishes that arrive meanwhile queue up in the process and go together once it is freed.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from celery_plus.stores.postgres.backend import PostgresBackend
from celery_plus.transport.backend import NewJob, PublishOutcome
from tests.conformance.stores import PG_URL, backends_on_one_store
from tests.support import wait_until


@pytest.fixture
def pg(tmp_path: Path) -> Iterator[PostgresBackend]:
    with backends_on_one_store("postgres", tmp_path) as make:
        yield make()  # type: ignore[misc]

def session(pg: PostgresBackend) -> psycopg.Connection[Any]:
    conn = psycopg.connect(PG_URL, autocommit=True)
    conn.execute(f"SET search_path TO {pg.qschema}")
    return conn

class Publisher(threading.Thread):
    """``pg.publish(job)`` on a thread of its own; its outcome or its error."""

    def __init__(self, pg: PostgresBackend, job: NewJob) -> None:
        super().__init__(daemon=True)
        self.pg, self.job = pg, job
        self.outcome: PublishOutcome | None = None
        self.error: BaseException | None = None
        self.committed_on_return: bool | None = None

    def run(self) -> None:
        try:
            self.outcome = self.pg.publish(self.job)
        except BaseException as exc:
            self.error = exc
            return
        with session(self.pg) as conn:  # another session sees the job: it is committed
            self.committed_on_return = conn.execute(
                "SELECT count(*) FROM jobs WHERE id = %s", (self.job.id,)).fetchone() == (1,)

def new_job(**fields: Any) -> NewJob:
    return NewJob(id=uuid.uuid4().hex, queue="gc", message='{"body": "x"}', name="t",
                  **fields)

def lock_waiters(conn: psycopg.Connection[Any], where: str, *params: Any) -> list[int]:
    return [row[0] for row in conn.execute(
        f"SELECT pid FROM pg_locks WHERE NOT granted AND {where}", params).fetchall()]

def held_up(pg: PostgresBackend, jobs: list[NewJob],
            blocker: psycopg.Connection[Any]) -> list[Publisher]:
    """Start a publisher per job while ``blocker`` holds ``jobs`` (SHARE, in an open
    transaction): the first one's insert waits for that lock, the others queue up in this
    process behind it."""
    blocker.execute("BEGIN")
    blocker.execute("LOCK TABLE jobs IN SHARE MODE")
    first = Publisher(pg, jobs[0])
    first.start()
    wait_until(lambda: lock_waiters(blocker, "locktype = 'relation' AND relation = %s::regclass",
                                    f"{pg.qschema}.jobs"), message="the first publish waits")
    rest = [Publisher(pg, job) for job in jobs[1:]]
    for publisher in rest:
        publisher.start()
    group = pg._current_engine().publishes
    wait_until(lambda: group.queued() == len(rest), message="the others queued up")
    return [first, *rest]

def test_concurrent_publishes_share_one_commit_and_each_returns_after_it(
        pg: PostgresBackend) -> None:
    jobs = [new_job() for _ in range(6)]
    with session(pg) as blocker, session(pg) as look:
        publishers = held_up(pg, jobs, blocker)
        assert all(p.is_alive() for p in publishers)  # nothing returns before its commit
        blocker.execute("COMMIT")
        for publisher in publishers:
            publisher.join(timeout=30)
        assert [p.error for p in publishers] == [None] * 6
        assert all(p.outcome is not None and p.outcome.accepted for p in publishers)
        assert all(p.committed_on_return for p in publishers)
        xmin = dict(look.execute("SELECT id, xmin::text FROM jobs").fetchall())
    # The first publish committed alone; the five that queued behind it, in one transaction.
    assert len({xmin[job.id] for job in jobs[1:]}) == 1
    assert xmin[jobs[0].id] != xmin[jobs[1].id]

def test_an_error_in_a_shared_transaction_reaches_only_its_own_caller(
        pg: PostgresBackend) -> None:
    bad = new_job(priority=2**40)  # not an integer of PostgreSQL's: the statement fails
    jobs = [new_job(), new_job(), bad, new_job()]
    with session(pg) as blocker, session(pg) as look:
        publishers = held_up(pg, jobs, blocker)
        blocker.execute("COMMIT")
        for publisher in publishers:
            publisher.join(timeout=30)
        stored = {row[0] for row in look.execute("SELECT id FROM jobs").fetchall()}
    errors = {p.job.id: p.error for p in publishers}
    assert isinstance(errors.pop(bad.id), psycopg.errors.NumericValueOutOfRange)
    assert list(errors.values()) == [None] * 3
    assert stored == {job.id for job in jobs} - {bad.id}

def test_a_connection_killed_under_a_shared_transaction_loses_nothing(
        pg: PostgresBackend) -> None:
    """The shared transaction waits for a row lock; its session is terminated there; it runs
    again on a new connection and every caller's job is stored once."""
    taken = new_job()
    assert pg.publish(taken).accepted
    again = NewJob(id=taken.id, queue="gc", message='{"body": "again"}', name="t")
    jobs = [new_job(), again, new_job(), new_job()]
    with session(pg) as row_lock, session(pg) as blocker, session(pg) as look:
        row_lock.execute("BEGIN")
        row_lock.execute("SELECT 1 FROM jobs WHERE id = %s FOR UPDATE", (taken.id,))
        xid = row_lock.execute("SELECT txid_current()::text").fetchone()[0]  # type: ignore[index]
        publishers = held_up(pg, jobs, blocker)
        blocker.execute("COMMIT")  # the first commits; the shared one waits for the row lock

        def group_waiting() -> list[int]:
            return lock_waiters(look, "locktype = 'transactionid' AND transactionid::text = %s",
                                xid)

        killed = wait_until(group_waiting, message="the shared transaction waits")
        look.execute("SELECT pg_terminate_backend(%s)", (killed[0],))
        wait_until(lambda: (found := group_waiting()) and found != killed,
                   message="the shared transaction runs again on a new connection")
        assert all(p.is_alive() for p in publishers[1:])
        row_lock.execute("COMMIT")
        for publisher in publishers:
            publisher.join(timeout=30)
        assert [p.error for p in publishers] == [None] * 4
        rows = dict(look.execute("SELECT id, msg FROM jobs").fetchall())
    assert set(rows) == {job.id for job in jobs}
    assert bytes(rows[taken.id]) == b'{"body": "again"}'

def test_one_publisher_runs_its_own_transaction_at_once(pg: PostgresBackend) -> None:
    """No waiting for company: a lone publish is one statement on one connection."""
    jobs = [new_job() for _ in range(3)]
    for job in jobs:
        assert pg.publish(job).accepted
    with session(pg) as look:
        xmin = dict(look.execute("SELECT id, xmin::text FROM jobs").fetchall())
    assert len(set(xmin.values())) == 3

_unused: Callable[..., Any] | None = None
