"""Group commit of the PostgreSQL store (``pg_pool.GroupCommit``, issue #13): threads of one
process publishing at the same time share one transaction, each returns only once its own
job is committed, an error reaches only the caller whose job caused it, and a connection that
dies under a shared transaction loses nothing (the transaction runs again on a new one). And
``publish_batch()``'s plain job whose id another session stores meanwhile keeps its batch place.

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

from celery_plus.model.store import NewJob, PublishOutcome
from celery_plus.stores.postgres.backend import PostgresBackend
from tests.fast.conformance.stores import PG_URL, backends_on_one_store
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

def xid_waiters(conn: psycopg.Connection[Any], holder: psycopg.Connection[Any]) -> list[int]:
    """The sessions waiting for ``holder``'s open transaction."""
    xid = holder.execute("SELECT txid_current()::text").fetchone()[0]  # type: ignore[index]
    return lock_waiters(conn, "locktype = 'transactionid' AND transactionid::text = %s", xid)


def held_up(pg: PostgresBackend, jobs: list[NewJob],
            blocker: psycopg.Connection[Any]) -> list[Publisher]:
    """Start a publisher per job while ``blocker`` holds the row of ``jobs[0]`` (stored first,
    then locked in an open transaction): the first publish, a replacement of that job, waits
    for the lock; the others queue up in this process behind it."""
    assert pg.publish(jobs[0]).accepted
    blocker.execute("BEGIN")
    blocker.execute("SELECT 1 FROM jobs WHERE id = %s FOR UPDATE", (jobs[0].id,))
    first = Publisher(pg, jobs[0])
    first.start()
    with session(pg) as look:
        wait_until(lambda: xid_waiters(look, blocker), message="the first publish waits")
    rest = [Publisher(pg, job) for job in jobs[1:]]
    for publisher in rest:
        publisher.start()
    group = pg._current_engine().publishes
    assert group is not None
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
        publishers = held_up(pg, jobs, blocker)
        blocker.execute("COMMIT")  # the first commits; the shared one waits for the row lock

        def group_waiting() -> list[int]:
            return xid_waiters(look, row_lock)

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


def test_a_publish_never_waits_for_a_shared_transaction_stuck_on_its_own_callers_lock(
        pg: PostgresBackend) -> None:
    """Thread B's open transaction holds a unique key (``publish_on``); thread A publishes the
    same key, so A's transaction waits for B's commit; B, before committing, publishes another
    job. B's publish must not wait for A's transaction (it would never end): it is stored and
    returns, B commits, and A's publish then finds the key held."""
    with session(pg) as b_conn, session(pg) as look:
        b_conn.execute("BEGIN")
        held = new_job(unique_lock="k", unique_window="ttl", unique_ttl_ms=60_000)
        assert pg.publish_on(b_conn, held).accepted
        a = Publisher(pg, new_job(unique_lock="k", unique_window="ttl", unique_ttl_ms=60_000))
        a.start()
        wait_until(lambda: xid_waiters(look, b_conn), message="A's publish waits for B")
        b_other = Publisher(pg, new_job())
        b_other.start()
        b_other.join(timeout=10)
        assert not b_other.is_alive(), "B's publish waits behind A's stuck transaction"
        assert b_other.error is None and b_other.committed_on_return
        b_conn.execute("COMMIT")
        a.join(timeout=30)
    assert a.error is None and a.outcome is not None
    assert a.outcome.holder_id == held.id


def test_a_shared_transaction_stuck_on_a_callers_lock_gives_every_job_back_to_its_caller(
        pg: PostgresBackend) -> None:
    """As above, but B's other publish lands in the same shared transaction as A's: that
    transaction gives up its lock wait and each caller publishes alone."""
    with session(pg) as b_conn, session(pg) as blocker, session(pg) as look:
        b_conn.execute("BEGIN")
        held = new_job(unique_lock="k", unique_window="ttl", unique_ttl_ms=60_000)
        assert pg.publish_on(b_conn, held).accepted
        same_key = new_job(unique_lock="k", unique_window="ttl", unique_ttl_ms=60_000)
        first, a, b_other = held_up(pg, [new_job(), same_key, new_job()], blocker)
        blocker.execute("COMMIT")  # A's and B's publishes go in one transaction
        b_other.join(timeout=10)
        assert not b_other.is_alive(), "B's publish waits in a transaction stuck on B's lock"
        assert b_other.error is None and b_other.committed_on_return
        b_conn.execute("COMMIT")
        for publisher in (first, a):
            publisher.join(timeout=30)
        assert look.execute("SELECT count(*) FROM jobs").fetchone() == (3,)
    assert first.error is None and a.error is None and a.outcome is not None
    assert a.outcome.holder_id == held.id


def test_a_plain_job_of_a_batch_stored_meanwhile_replaces_it_in_its_batch_place(
        pg: PostgresBackend) -> None:
    """``publish_batch()``'s INSERT of a plain job finds the id stored by another session's
    transaction since the batch began: the job goes through ``publish()`` (a replacement) and
    keeps its place in the batch's order."""
    stored_meanwhile = new_job()
    batch = [NewJob(id=stored_meanwhile.id, queue="gc", message="second", name="t"),
             new_job()]
    outcomes: list[PublishOutcome] = []
    with session(pg) as other, session(pg) as look:
        other.execute("BEGIN")
        assert pg.publish_on(other, stored_meanwhile).accepted
        publisher = threading.Thread(target=lambda: outcomes.extend(pg.publish_many(batch)),
                                     daemon=True)
        publisher.start()
        wait_until(lambda: xid_waiters(look, other), message="the batch's INSERT waits")
        other.execute("COMMIT")
        publisher.join(timeout=30)
    assert [(o.accepted, o.fenced) for o in outcomes] == [(True, False), (True, False)]
    claims = pg.claim(["gc"], "w", 10).claims
    assert [(c.job_id, c.message) for c in claims] == [
        (batch[0].id, b"second"), (batch[1].id, b'{"body": "x"}')]
