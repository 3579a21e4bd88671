"""Store-level tests of the SQLite backend (no worker process): the Redis store's rules, on SQLite.

Covers the store rules of the foundation issue (DESIGN.md §3.2-§3.6) exactly as
``test_redis_store.py`` states them for Redis: byte-for-byte delivery, priority/FIFO order and
batched claims, fenced settles, the pending/running/ttl uniqueness windows and duplicate
publishes (the holder is returned), continuations, concurrency slots and parked jobs (unblock
order), heartbeats (lost ids), lease recovery by the stored deadline, delivery limits, dead
letters with details, uncounted releases, ETA scheduling and the maintenance pass (throttle,
pruning, unblock sweep). SQLite-specific: the ``plus+sqlite:`` URL forms, one transaction per
change under several processes (4 publishers x 250 jobs, 2 claimers: every accepted job
completed exactly once, no "database is locked" escapes), and the idle wake-up (a waiter is
woken within 50 ms of a publish from another process; an idle wait lasts its timeout).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sqlite3
import statistics
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from celery.exceptions import ImproperlyConfigured

from celery_plus.transport import make_backend as make_transport_backend
from celery_plus.transport.backend import NewJob, Settle
from celery_plus.transport.sqlite_backend import SQLiteBackend, sqlite_path

Q = "jobs"


def wait_until(predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02,
               message: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


# -- fixtures and views of the tables ----------------------------------------------------


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "store.db"


@pytest.fixture
def make_store(db_path: Path) -> Iterator[Callable[..., SQLiteBackend]]:
    """Build more backends on the test's database (e.g. with another lease or retention)."""
    made: list[SQLiteBackend] = []

    def make(**kwargs: Any) -> SQLiteBackend:
        kwargs.setdefault("lease_ms", 30_000)
        kwargs.setdefault("maintenance_interval_ms", 1)
        backend = SQLiteBackend(f"sqlite:///{db_path}", **kwargs)
        made.append(backend)
        return backend

    yield make
    for backend in made:
        backend.close()


@pytest.fixture
def store(make_store: Callable[..., SQLiteBackend]) -> SQLiteBackend:
    """The test's backend: 30 s leases, maintenance not throttled."""
    return make_store()


@pytest.fixture
def db(store: SQLiteBackend, db_path: Path) -> Iterator[sqlite3.Connection]:
    """A direct connection for reading (and, rarely, editing) the tables."""
    conn = sqlite3.connect(db_path, isolation_level=None, timeout=10)
    yield conn
    conn.close()


def now_ms() -> int:
    return int(time.time() * 1000)


def publish(backend: SQLiteBackend, job_id: str, message: str | None = None, **kw: Any) -> Any:
    kw.setdefault("queue", Q)
    return backend.publish(NewJob(id=job_id, message=message or f"msg-{job_id}", **kw))


def claim(backend: SQLiteBackend, max_jobs: int = 10, worker: str = "w1",
          queues: tuple[str, ...] = (Q,), settles: tuple[Settle, ...] = ()) -> Any:
    return backend.claim(list(queues), worker, max_jobs, settles)


def job(backend: SQLiteBackend, job_id: str) -> dict[str, str]:
    return backend.job(job_id) or {}


def holder(db: sqlite3.Connection, lock: str) -> str | None:
    row = db.execute("SELECT holder FROM holds WHERE lock = ? AND expires_ms >= ?",
                     (lock, now_ms())).fetchone()
    return None if row is None else row[0]


def hold_ttl_ms(db: sqlite3.Connection, lock: str) -> int:
    return int(db.execute("SELECT expires_ms FROM holds WHERE lock = ?",
                          (lock,)).fetchone()[0]) - now_ms()


def lease(db: sqlite3.Connection, job_id: str) -> int | None:
    row = db.execute("SELECT lease_expires_ms FROM jobs WHERE id = ? AND state = 'running'",
                     (job_id,)).fetchone()
    return None if row is None else row[0]


def slots(db: sqlite3.Connection, group: str) -> set[str]:
    return {r[0] for r in db.execute("SELECT job_id FROM slots WHERE conc_group = ?", (group,))}


def in_state(db: sqlite3.Connection, state: str, queue: str | None = None) -> list[str]:
    order = "score" if state in ("enqueued", "blocked") else "finished_ms, id"
    sql = f"SELECT id FROM jobs WHERE state = ? {'AND queue = ?' if queue else ''} ORDER BY {order}"
    return [r[0] for r in db.execute(sql, (state, queue) if queue else (state,))]


def stat(db: sqlite3.Connection, name: str) -> int:
    row = db.execute("SELECT value FROM meta WHERE key = ?", (f"stats:{name}",)).fetchone()
    return 0 if row is None else int(row[0])


def maintain(backend: SQLiteBackend) -> None:
    """Run one maintenance pass (waiting out the 1 ms throttle of the previous one)."""
    wait_until(lambda: backend.maintain("w"), message="maintenance lock")


def ids(result: Any) -> list[str]:
    return [c.job_id for c in result.claims]


# -- URLs -------------------------------------------------------------------------------


def test_url_forms_follow_sqlalchemy(tmp_path):
    assert sqlite_path("sqlite:///relative.db") == "relative.db"
    assert sqlite_path("sqlite:///sub/dir/x.db") == "sub/dir/x.db"
    assert sqlite_path("sqlite:////abs/path.db") == "/abs/path.db"
    assert sqlite_path("sqlite:////abs/path.db?timeout=3") == "/abs/path.db"
    for bad in ("sqlite://", "sqlite:///", "sqlite://host/x.db", "sqlite:///:memory:"):
        with pytest.raises(ImproperlyConfigured, match="plus\\+sqlite:///relative"):
            sqlite_path(bad)
    with pytest.raises(ImproperlyConfigured, match="does not exist"):
        SQLiteBackend(f"sqlite:///{tmp_path}/missing/dir/x.db")


def test_make_backend_dispatches_sqlite_urls(tmp_path, monkeypatch):
    from celery_plus import settings

    monkeypatch.chdir(tmp_path)
    config = settings.resolve({"plus_visibility_timeout": 7})
    relative = make_transport_backend("sqlite:///rel.db", config)
    absolute = make_transport_backend(f"sqlite:///{tmp_path}/abs.db", config)
    try:
        assert isinstance(relative, SQLiteBackend) and isinstance(absolute, SQLiteBackend)
        assert relative.path == str(tmp_path / "rel.db")
        assert absolute.path == str(tmp_path / "abs.db")
        assert relative.lease_ms == 7000
        assert (tmp_path / "rel.db").exists() and (tmp_path / "abs.db").exists()
    finally:
        relative.close()
        absolute.close()


def test_database_is_in_wal_mode_with_the_documented_tables(store, db):
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"jobs", "holds", "slots", "transient", "bindings", "meta"} <= tables


# -- delivery ---------------------------------------------------------------------------


def test_publish_then_claim_delivers_the_message_byte_for_byte(store):
    message = json.dumps({"body": "e30=", "headers": {"task": "t", "note": "héllo ✓ \u0000"},
                          "properties": {"x": [1, 2.5, None]}}, ensure_ascii=False)
    out = publish(store, "a", message, name="t")
    assert out.accepted and out.state == "enqueued" and not out.continued
    result = claim(store, worker="w1")
    assert len(result.claims) == 1
    got = result.claims[0]
    assert got.job_id == "a" and got.token == 1 and got.deliveries == 1 and got.queue == Q
    assert got.message == message.encode()
    record = job(store, "a")
    assert record["st"] == "running" and record["wk"] == "w1" and record["name"] == "t"
    assert record["msg"] == message


def test_job_record_uses_the_redis_field_names(store):
    publish(store, "a", name="t", priority=3, unique_lock="L", unique_window="pending",
            concurrency_group="g", concurrency_limit=2, max_deliveries=4)
    record = job(store, "a")
    assert record["st"] == "enqueued" and record["q"] == Q and record["msg"] == "msg-a"
    assert record["dl"] == "0" and record["mdl"] == "4" and record["uk"] == "L"
    assert record["uw"] == "pending" and record["ut"] == "0"
    assert record["cg"] == "g" and record["cl"] == "2" and record["due"] == "0"
    assert int(record["score"]) >> 40 == 3 and int(record["enq"]) > 0
    # Fields the Redis hash gets later are absent until then.
    assert not {"tok", "start", "fin", "wk", "reason", "hist"} & set(record)
    assert store.job("missing") is None
    # A job with neither unique key nor group has no extension fields (as on Redis).
    publish(store, "plain")
    assert not {"uk", "uw", "ut", "cg", "cl"} & set(job(store, "plain"))
    assert ids(claim(store)) == ["plain", "a"]  # a has priority 3


def test_claim_order_is_priority_then_fifo(store):
    # Lower priority value first; equal priorities in publish order.
    for job_id, pri in [("p5a", 5), ("p0a", 0), ("p9", 9), ("p5b", 5), ("p0b", 0), ("p5c", 5)]:
        publish(store, job_id, priority=pri)
    order = []
    for _ in range(6):
        order += ids(claim(store, max_jobs=1))
    assert order == ["p0a", "p0b", "p5a", "p5b", "p5c", "p9"]
    assert ids(claim(store)) == []


def test_claim_batches_up_to_max_jobs(store):
    for i in range(7):
        publish(store, f"j{i}")
    assert ids(claim(store, max_jobs=3)) == ["j0", "j1", "j2"]
    assert ids(claim(store, max_jobs=3)) == ["j3", "j4", "j5"]
    assert ids(claim(store, max_jobs=3)) == ["j6"]
    assert ids(claim(store, max_jobs=3)) == []
    assert store.size(Q) == 0


def test_claims_of_several_queues_follow_the_given_order(store):
    publish(store, "b1", queue="b")
    publish(store, "a1", queue="a")
    assert ids(claim(store, queues=("a", "b"))) == ["a1", "b1"]


def test_claim_applies_settles_first_in_the_same_transaction(store, db):
    publish(store, "a", concurrency_group="g", concurrency_limit=1)
    publish(store, "b", concurrency_group="g", concurrency_limit=1)
    publish(store, "c", max_deliveries=1)
    first = claim(store, max_jobs=3)
    assert ids(first) == ["a", "c"] and first.blocked == ["b"]
    tokens = {c.job_id: c.token for c in first.claims}
    # Acking a frees the slot; b is unblocked by the settle and claimed by the same call.
    result = claim(store, settles=(Settle("a", tokens["a"], "ack"),
                                   Settle("c", tokens["c"], "requeue")))
    assert ids(result) == ["b"]
    assert result.dead_lettered == [("c", "delivery limit")]
    assert job(store, "a")["st"] == "completed" and job(store, "c")["st"] == "failed"


def test_size_and_purge_count_enqueued_jobs_only(store):
    for i in range(3):
        publish(store, f"j{i}")
    publish(store, "later", eta_ms=now_ms() + 60_000)
    publish(store, "other", queue="other")
    claim(store, max_jobs=1)
    assert store.size(Q) == 2 and store.size("other") == 1
    assert store.purge(Q) == 2
    assert store.size(Q) == 0 and store.job("j1") is None
    assert job(store, "j0")["st"] == "running" and job(store, "later")["st"] == "scheduled"


# -- fencing ----------------------------------------------------------------------------


def test_settle_is_fenced_by_token(store, db):
    publish(store, "a")
    first = claim(store).claims[0]
    store.settle([Settle("a", first.token, "release")])
    second = claim(store, worker="w2").claims[0]
    assert second.token == first.token + 1
    # Every settle with the stale token changes nothing.
    for action in ("ack", "fail", "reject", "requeue", "release"):
        assert store.settle([Settle("a", first.token, action, {"reason": "late"})]) == []
        record = job(store, "a")
        assert record["st"] == "running" and record["wk"] == "w2", action
        assert lease(db, "a") is not None
    assert in_state(db, "completed") == [] and in_state(db, "failed") == []
    # A settle for an unknown token is no more effective.
    store.settle([Settle("a", second.token + 5, "ack")])
    assert job(store, "a")["st"] == "running"
    # The current token settles.
    store.settle([Settle("a", second.token, "ack")])
    assert job(store, "a")["st"] == "completed"
    assert lease(db, "a") is None
    # And a settle of a finished job is a no-op too.
    store.settle([Settle("a", second.token, "reject")])
    assert job(store, "a")["st"] == "completed"


# -- uniqueness holds -------------------------------------------------------------------


def test_ack_releases_running_hold_only_for_holder(make_store, db):
    backend = make_store(backstop_ms=600)
    publish(backend, "a", unique_lock="L", unique_window="running")
    assert holder(db, "L") == "a"
    tok_a = claim(backend).claims[0].token
    # The backstop lets a stuck hold go; another job then takes the key.
    wait_until(lambda: holder(db, "L") is None, message="backstop expiry")
    assert publish(backend, "b", unique_lock="L", unique_window="running").accepted
    assert holder(db, "L") == "b"
    backend.settle([Settle("a", tok_a, "ack")])
    assert job(backend, "a")["st"] == "completed"
    assert holder(db, "L") == "b", "a's ack released b's hold"
    # The holder's own ack releases it.
    long = make_store()
    tok_b = claim(long).claims[0].token
    assert holder(db, "L") == "b"
    long.settle([Settle("b", tok_b, "ack")])
    assert holder(db, "L") is None


def test_running_hold_is_kept_while_running_and_released_by_dead_letter(store, db):
    publish(store, "a", unique_lock="L", unique_window="running")
    tok = claim(store).claims[0].token
    assert holder(db, "L") == "a"
    assert not publish(store, "b", unique_lock="L", unique_window="running").accepted
    store.settle([Settle("a", tok, "fail", {"reason": "task failed"})])
    assert holder(db, "L") is None
    assert publish(store, "b", unique_lock="L", unique_window="running").accepted


def test_pending_hold_released_at_claim_and_retaken_on_requeue(store, db):
    publish(store, "a", unique_lock="L", unique_window="pending")
    assert holder(db, "L") == "a"
    dup = publish(store, "b", unique_lock="L", unique_window="pending")
    assert not dup.accepted and dup.holder_id == "a"
    tok = claim(store).claims[0].token
    assert holder(db, "L") is None
    store.settle([Settle("a", tok, "requeue")])
    assert job(store, "a")["st"] == "enqueued"
    assert holder(db, "L") == "a"
    dup = publish(store, "c", unique_lock="L", unique_window="pending")
    assert not dup.accepted and dup.holder_id == "a"
    # The same applies to a graceful release.
    tok = claim(store).claims[0].token
    assert holder(db, "L") is None
    store.settle([Settle("a", tok, "release")])
    assert holder(db, "L") == "a"


def test_requeue_in_pending_window_coalesces_when_key_taken(store, db):
    publish(store, "a", unique_lock="L", unique_window="pending")
    tok = claim(store).claims[0].token
    assert publish(store, "b", unique_lock="L", unique_window="pending").accepted
    assert holder(db, "L") == "b"
    store.settle([Settle("a", tok, "requeue")])
    record = job(store, "a")
    assert record["st"] == "completed" and record["reason"] == "coalesced"
    assert holder(db, "L") == "b"
    assert in_state(db, "enqueued", Q) == ["b"]
    assert stat(db, "deduplicated") == 1


def test_ttl_hold_never_released_early(store, db):
    publish(store, "a", unique_lock="T", unique_window="ttl", unique_ttl_ms=60_000)
    assert holder(db, "T") == "a"
    tok = claim(store).claims[0].token
    assert holder(db, "T") == "a", "claim released a ttl hold"
    store.settle([Settle("a", tok, "ack")])
    assert job(store, "a")["st"] == "completed"
    assert holder(db, "T") == "a", "ack released a ttl hold"
    assert hold_ttl_ms(db, "T") > 50_000
    dup = publish(store, "b", unique_lock="T", unique_window="ttl", unique_ttl_ms=60_000)
    assert not dup.accepted and dup.holder_id == "a"
    # Nor is it released by a dead letter or a requeue.
    publish(store, "c", unique_lock="T2", unique_window="ttl", unique_ttl_ms=60_000)
    tok = claim(store).claims[0].token
    store.settle([Settle("c", tok, "requeue")])
    assert holder(db, "T2") == "c"
    tok = claim(store).claims[0].token
    store.settle([Settle("c", tok, "reject")])
    assert job(store, "c")["st"] == "failed"
    assert holder(db, "T2") == "c"
    # It goes when the TTL is over, and only then.
    publish(store, "d", unique_lock="T3", unique_window="ttl", unique_ttl_ms=1_500)
    tok = claim(store).claims[0].token
    store.settle([Settle("d", tok, "ack")])
    assert holder(db, "T3") == "d"
    wait_until(lambda: holder(db, "T3") is None, message="ttl expiry")
    assert publish(store, "e", unique_lock="T3", unique_window="ttl",
                   unique_ttl_ms=1_500).accepted


def test_duplicate_publish_returns_holder(store, db):
    first = publish(store, "a", unique_lock="L", unique_window="running")
    assert first.accepted and first.holder_id is None
    dup = publish(store, "b", "other message", unique_lock="L", unique_window="running")
    assert not dup.accepted and dup.holder_id == "a" and dup.job_id == "b"
    assert store.job("b") is None
    assert in_state(db, "enqueued", Q) == ["a"]
    assert job(store, "a")["msg"] == "msg-a"
    # Also while the holder runs.
    claim(store)
    dup = publish(store, "c", unique_lock="L", unique_window="running")
    assert not dup.accepted and dup.holder_id == "a"
    assert stat(db, "deduplicated") == 2


def test_publish_many_decides_each_job_in_order(store, db):
    jobs = [NewJob(id="a", queue=Q, message="m-a", unique_lock="L", unique_window="running"),
            NewJob(id="b", queue=Q, message="m-b", unique_lock="L", unique_window="running"),
            NewJob(id="c", queue=Q, message="m-c", priority=1),
            NewJob(id="d", queue=Q, message="m-d", eta_ms=now_ms() + 60_000)]
    out = store.publish_many(jobs)
    assert [(o.job_id, o.accepted, o.holder_id, o.state) for o in out] == [
        ("a", True, None, "enqueued"), ("b", False, "a", ""), ("c", True, None, "enqueued"),
        ("d", True, None, "scheduled")]
    assert in_state(db, "enqueued", Q) == ["a", "c"]
    assert store.publish_many([]) == []


def test_republish_of_the_same_id_replaces_its_message(store, db):
    publish(store, "a", "first", unique_lock="L", unique_window="running")
    again = publish(store, "a", "second", unique_lock="L", unique_window="running")
    assert again.accepted and not again.continued
    assert in_state(db, "enqueued", Q) == ["a"]
    assert claim(store).claims[0].message == b"second"


def test_duplicate_republish_of_an_existing_id_leaves_that_job_in_place(store, db):
    publish(store, "a", "first")
    publish(store, "b", unique_lock="L", unique_window="running")
    dup = publish(store, "a", "second", unique_lock="L", unique_window="running")
    assert not dup.accepted and dup.holder_id == "b"
    assert job(store, "a")["msg"] == "first"
    assert in_state(db, "enqueued", Q) == ["a", "b"]
    assert [c.message for c in claim(store).claims] == [b"first", b"msg-b"]


def test_republish_of_a_finished_id_starts_afresh(store):
    publish(store, "a", "first")
    tok = claim(store).claims[0].token
    store.settle([Settle("a", tok, "fail", {"exc_type": "E", "traceback": "tb"})])
    assert job(store, "a")["st"] == "failed"
    out = publish(store, "a", "second")
    assert out.accepted and out.state == "enqueued"
    record = job(store, "a")
    assert record["st"] == "enqueued" and record["dl"] == "0" and record["tok"] == "1"
    assert not {"reason", "etype", "emsg", "tb", "start", "fin", "wk"} & set(record)
    assert json.loads(record["hist"])[-1]["outcome"] == "task failed", "history kept"
    again = claim(store).claims[0]
    assert again.message == b"second" and again.token == 2 and again.deliveries == 1


def test_continuation_settles_running_claim_and_keeps_running_hold(store, db):
    publish(store, "a", "attempt-1", unique_lock="L", unique_window="running",
            concurrency_group="g", concurrency_limit=1)
    publish(store, "x", concurrency_group="g", concurrency_limit=1)
    first = claim(store, max_jobs=1).claims[0]
    assert slots(db, "g") == {"a"}
    assert ids(claim(store)) == [] and job(store, "x")["st"] == "blocked"
    # Retry / Task.replace: a new message with the running job's id.
    eta = now_ms() + 60_000
    out = publish(store, "a", "attempt-2", eta_ms=eta, unique_lock="L",
                  unique_window="running", concurrency_group="g", concurrency_limit=1)
    assert out.accepted and out.continued and out.state == "scheduled"
    record = job(store, "a")
    assert record["st"] == "scheduled" and record["msg"] == "attempt-2"
    assert record["due"] == str(eta)
    assert lease(db, "a") is None
    assert "a" not in slots(db, "g")
    assert job(store, "x")["st"] == "enqueued", "freed slot did not unblock"
    assert holder(db, "L") == "a"
    assert json.loads(record["hist"])[-1]["outcome"] == "retried"
    # The old delivery's ack is a fenced no-op.
    store.settle([Settle("a", first.token, "ack")])
    assert job(store, "a")["st"] == "scheduled"
    assert holder(db, "L") == "a"
    assert not publish(store, "b", unique_lock="L", unique_window="running").accepted
    # An immediate continuation is claimable with a new token.
    publish(store, "a", "attempt-3", unique_lock="L", unique_window="running")
    claims = claim(store, max_jobs=5).claims
    again = next(c for c in claims if c.job_id == "a")
    assert again.message == b"attempt-3" and again.token == first.token + 1


def test_continuation_into_a_taken_key_coalesces_the_running_job(store, db):
    publish(store, "a", unique_lock="P", unique_window="pending")
    claim(store)
    assert publish(store, "b", unique_lock="P", unique_window="pending").accepted
    out = publish(store, "a", "retry", unique_lock="P", unique_window="pending")
    assert not out.accepted and out.holder_id == "b"
    record = job(store, "a")
    assert record["st"] == "completed" and record["reason"] == "coalesced"
    assert lease(db, "a") is None


# -- concurrency slots ------------------------------------------------------------------


def test_slot_taken_atomically_with_claim_and_full_group_parks_job(make_store, db):
    one, two = make_store(), make_store()
    for i in range(3):
        publish(one, f"g{i}", concurrency_group="g", concurrency_limit=2)
    result = claim(one, max_jobs=3)
    assert ids(result) == ["g0", "g1"] and result.blocked == ["g2"]
    assert slots(db, "g") == {"g0", "g1"}
    assert job(one, "g2")["st"] == "blocked"
    assert in_state(db, "blocked") == ["g2"]
    assert in_state(db, "enqueued", Q) == []
    assert stat(db, "blocked") == 1
    # Another worker sees no free slot either.
    publish(two, "g3", concurrency_group="g", concurrency_limit=2)
    result = claim(two, worker="w2")
    assert ids(result) == [] and result.blocked == ["g3"]
    assert len(slots(db, "g")) == 2


def test_parked_job_does_not_block_other_groups(store, db):
    publish(store, "g1", concurrency_group="g", concurrency_limit=1)
    publish(store, "g2", concurrency_group="g", concurrency_limit=1)
    publish(store, "g3", concurrency_group="g", concurrency_limit=1)
    publish(store, "h1", concurrency_group="h", concurrency_limit=1)
    publish(store, "free")
    assert ids(claim(store, max_jobs=1)) == ["g1"]
    result = claim(store, max_jobs=2)
    assert ids(result) == ["h1", "free"]
    assert result.blocked == ["g2", "g3"]
    assert slots(db, "h") == {"h1"}


def test_freed_slot_unblocks_parked_job_in_order(store, db):
    for name in ("a", "b", "c"):
        publish(store, name, concurrency_group="g", concurrency_limit=1)
    a = claim(store, max_jobs=1).claims[0]
    assert claim(store).blocked == ["b", "c"]
    publish(store, "later")
    store.settle([Settle("a", a.token, "ack")])
    assert job(store, "b")["st"] == "enqueued"
    assert job(store, "c")["st"] == "blocked"
    # b keeps its place in line, ahead of a job published after it.
    b = claim(store, max_jobs=1).claims[0]
    assert b.job_id == "b"
    assert ids(claim(store, max_jobs=1)) == ["later"]
    store.settle([Settle("b", b.token, "reject")])  # a dead letter frees the slot too
    assert job(store, "c")["st"] == "enqueued"
    assert ids(claim(store)) == ["c"]
    assert in_state(db, "blocked") == []


def test_every_exit_of_a_claim_frees_its_slot(make_store, db):
    backend = make_store(lease_ms=150)
    exits: list[Callable[[str, int], Any]] = [
        lambda i, t: backend.settle([Settle(i, t, "ack")]),
        lambda i, t: backend.settle([Settle(i, t, "fail", {"reason": "task failed"})]),
        lambda i, t: backend.settle([Settle(i, t, "requeue")]),
        lambda i, t: backend.settle([Settle(i, t, "release")]),
        lambda i, t: wait_until(lambda: backend.recover(), message="recovery"),
        lambda i, t: publish(backend, i, concurrency_group=f"g{5}", concurrency_limit=1),
    ]
    for n, leave in enumerate(exits):
        group = f"g{n}"
        publish(backend, f"{group}-a", concurrency_group=group, concurrency_limit=1)
        got = claim(backend, max_jobs=1).claims[0]
        assert slots(db, group) == {got.job_id}
        leave(got.job_id, got.token)
        assert slots(db, group) == set(), n
        if job(backend, got.job_id)["st"] == "enqueued":
            claimed = claim(backend, max_jobs=1).claims[0]
            backend.settle([Settle(claimed.job_id, claimed.token, "ack")])


# -- leases -----------------------------------------------------------------------------


def test_heartbeat_renews_only_current_claims(make_store, db):
    short = make_store(lease_ms=5_000)
    for name in ("a", "b", "c"):
        publish(short, name)
    claims = {c.job_id: c for c in claim(short).claims}
    short.settle([Settle("b", claims["b"].token, "ack")])
    before = lease(db, "a")
    renewer = make_store(lease_ms=600_000)
    lost = renewer.heartbeat([("a", claims["a"].token), ("b", claims["b"].token),
                              ("c", claims["c"].token + 1), ("nope", 1)])
    assert sorted(lost) == ["b", "c", "nope"]
    after = lease(db, "a")
    assert after is not None and before is not None and after >= before + 590_000
    c_lease = lease(db, "c")
    assert c_lease is not None and c_lease < before + 10_000
    assert lease(db, "b") is None and lease(db, "nope") is None
    assert renewer.heartbeat([]) == []


def test_recover_requeues_expired_lease_by_stored_deadline(make_store, db):
    short = make_store(lease_ms=200)
    long = make_store(lease_ms=600_000)
    publish(short, "short")
    publish(short, "long")
    assert ids(claim(short, max_jobs=1, worker="dead-worker")) == ["short"]
    assert ids(claim(long, max_jobs=1, worker="live-worker")) == ["long"]
    # A recovering worker with long leases still recovers by the stored deadline...
    recovered = wait_until(lambda: long.recover(), message="expired lease recovered")
    assert [(r.job_id, r.outcome) for r in recovered] == [("short", "requeued")]
    record = job(short, "short")
    assert record["st"] == "enqueued"
    hist = json.loads(record["hist"])
    assert hist[-1]["outcome"] == "lease expired" and hist[-1]["worker"] == "dead-worker"
    assert hist[-1]["exc_message"] == "lease expired (claimed by dead-worker)"
    assert stat(db, "recovered") == 1
    # ...and one with short leases never recovers a claim whose stored deadline is far.
    assert short.recover() == []
    assert job(short, "long")["st"] == "running"
    again = claim(long).claims[0]
    assert again.job_id == "short" and again.deliveries == 2 and again.token == 2
    # The dead worker's late ack is fenced out.
    short.settle([Settle("short", 1, "ack")])
    assert job(short, "short")["st"] == "running"


def test_recover_dead_letters_at_delivery_limit(make_store, db):
    backend = make_store(lease_ms=150)
    publish(backend, "a", unique_lock="L", unique_window="running", max_deliveries=2)
    assert claim(backend).claims[0].deliveries == 1
    out = wait_until(lambda: backend.recover(), message="first recovery")
    assert [(r.job_id, r.outcome) for r in out] == [("a", "requeued")]
    assert claim(backend).claims[0].deliveries == 2
    out = wait_until(lambda: backend.recover(), message="second recovery")
    assert [(r.job_id, r.outcome) for r in out] == [("a", "dead")]
    record = job(backend, "a")
    assert record["st"] == "failed" and record["reason"] == "delivery limit"
    assert "2 times" in record["emsg"]
    assert record["msg"] == "msg-a"
    assert in_state(db, "failed") == ["a"]
    assert lease(db, "a") is None
    assert holder(db, "L") is None
    assert ids(claim(backend)) == []


def test_recover_in_pending_window_coalesces_when_key_taken(make_store, db):
    backend = make_store(lease_ms=150)
    publish(backend, "a", unique_lock="P", unique_window="pending")
    claim(backend)
    assert publish(backend, "b", unique_lock="P", unique_window="pending").accepted
    out = wait_until(lambda: backend.recover(), message="recovery")
    assert [(r.job_id, r.outcome) for r in out] == [("a", "coalesced")]
    assert job(backend, "a")["reason"] == "coalesced"
    assert holder(db, "P") == "b"


def test_requeue_dead_letters_at_delivery_limit(store):
    publish(store, "a", max_deliveries=1)
    tok = claim(store).claims[0].token
    assert store.settle([Settle("a", tok, "requeue")]) == [("a", "delivery limit")]
    record = job(store, "a")
    assert record["st"] == "failed"
    assert record["emsg"] == "message delivered 1 times without being settled"


def test_reject_dead_letters_with_details(store, db):
    publish(store, "a", "the message", unique_lock="L", unique_window="running")
    publish(store, "b")
    claims = {c.job_id: c for c in claim(store).claims}
    detail = {"exc_type": "ValueError", "exc_message": "bad input", "traceback": "Traceback..."}
    dead = store.settle([Settle("a", claims["a"].token, "reject", detail),
                         Settle("b", claims["b"].token, "fail",
                                {"reason": "task failed", "exc_type": "KeyError"})])
    assert dead == [("a", "rejected"), ("b", "task failed")]
    assert "reason" not in detail, "the caller's detail was modified"
    record = job(store, "a")
    assert record["st"] == "failed" and record["reason"] == "rejected"
    assert record["etype"] == "ValueError" and record["emsg"] == "bad input"
    assert record["tb"] == "Traceback..."
    assert record["msg"] == "the message"
    assert int(record["fin"]) > 0
    hist = json.loads(record["hist"])
    assert hist[-1]["outcome"] == "rejected" and hist[-1]["exc_type"] == "ValueError"
    assert hist[-1]["delivery"] == 1 and hist[-1]["worker"] == "w1"
    assert set(in_state(db, "failed")) == {"a", "b"}
    assert holder(db, "L") is None
    assert lease(db, "a") is None
    assert job(store, "b")["reason"] == "task failed"
    assert stat(db, "dead_lettered") == 2


def test_requeue_records_an_attempt_with_its_reason(store):
    publish(store, "a")
    tok = claim(store).claims[0].token
    store.settle([Settle("a", tok, "requeue", {"reason": "worker lost", "exc_type": "WL"})])
    tok = claim(store).claims[0].token
    store.settle([Settle("a", tok, "requeue")])
    hist = json.loads(job(store, "a")["hist"])
    assert [h["outcome"] for h in hist] == ["worker lost", "requeued"]
    assert hist[0]["exc_type"] == "WL" and "exc_type" not in hist[1]
    assert [h["delivery"] for h in hist] == [1, 2]


def test_release_does_not_count_a_delivery(store):
    publish(store, "a", max_deliveries=1)
    for _ in range(3):
        got = claim(store).claims[0]
        assert got.deliveries == 1
        assert store.settle([Settle("a", got.token, "release")]) == []
        record = job(store, "a")
        assert record["st"] == "enqueued" and record["dl"] == "0"
    # A counted requeue at the limit dead-letters.
    got = claim(store).claims[0]
    assert store.settle([Settle("a", got.token, "requeue")]) == [("a", "delivery limit")]


# -- scheduling -------------------------------------------------------------------------


def test_eta_job_scheduled_until_due_then_claimable(store, db):
    due = now_ms() + 1_500
    out = publish(store, "later", eta_ms=due)
    assert out.accepted and out.state == "scheduled"
    publish(store, "now")
    assert job(store, "later")["st"] == "scheduled"
    assert job(store, "later")["due"] == str(due)
    first = claim(store)
    assert ids(first) == ["now"]
    assert first.next_due is not None and 0 < first.next_due <= 1.5
    assert ids(claim(store)) == []
    got = wait_until(lambda: ids(claim(store)), message="due job claimable")
    assert got == ["later"]
    record = job(store, "later")
    assert int(record["start"]) >= due
    assert claim(store).next_due is None
    # An eta in the past is enqueued at once.
    out = publish(store, "past", eta_ms=now_ms() - 1000)
    assert out.state == "enqueued"


def test_maintain_promotes_due_scheduled_jobs(store, db):
    publish(store, "a", eta_ms=now_ms() + 300)
    wait_until(lambda: store.maintain("w") and job(store, "a")["st"] == "enqueued",
               message="promotion")
    assert in_state(db, "enqueued", Q) == ["a"]


def test_maintain_is_throttled_across_workers(make_store):
    one = make_store(maintenance_interval_ms=60_000)
    two = make_store(maintenance_interval_ms=60_000)
    assert one.maintain("w1") is True
    assert two.maintain("w2") is False
    assert one.maintain("w1") is False


def test_maintain_prunes_completed_past_retention(make_store, db):
    backend = make_store(retention=(2_000, 100_000, 600_000, 100_000))
    for name in ("a", "b", "dead"):
        publish(backend, name)
    claims = {c.job_id: c for c in claim(backend).claims}
    backend.settle([Settle("a", claims["a"].token, "ack"), Settle("b", claims["b"].token, "ack"),
                    Settle("dead", claims["dead"].token, "fail", {"reason": "task failed"})])
    maintain(backend)
    assert backend.job("a") is not None, "pruned before its retention"
    wait_until(lambda: backend.maintain("w") and in_state(db, "completed") == [],
               message="completed pruned")
    assert backend.job("a") is None and backend.job("b") is None
    assert job(backend, "dead")["st"] == "failed", "dead letter pruned by completed retention"
    # Count bound: only the newest N completed records are kept.
    counted = make_store(retention=(600_000, 2, 600_000, 1))
    for i in range(4):
        publish(counted, f"c{i}")
        got = claim(counted).claims[0]
        counted.settle([Settle(got.job_id, got.token, "ack")])
    publish(counted, "dead2")
    got = claim(counted).claims[0]
    counted.settle([Settle("dead2", got.token, "reject")])
    maintain(counted)
    assert in_state(db, "completed") == ["c2", "c3"]
    assert counted.job("c0") is None and counted.job("c1") is None
    assert job(counted, "c3")["st"] == "completed"
    assert in_state(db, "failed") == ["dead2"]
    assert counted.job("dead") is None


def test_maintain_unblocks_groups_with_free_slots(store, db):
    for name in ("a", "b", "c"):
        publish(store, name, concurrency_group="g", concurrency_limit=1)
    a = claim(store).claims[0]
    assert job(store, "b")["st"] == "blocked"
    # While the group is full, maintenance leaves the parked jobs alone.
    maintain(store)
    assert job(store, "b")["st"] == "blocked"
    # The slot entry goes stale (its job left running without settling through the store,
    # e.g. an operator edit): maintenance drops it and unblocks one job per free slot.
    db.execute("UPDATE jobs SET state = 'canceled' WHERE id = 'a'")
    maintain(store)
    assert slots(db, "g") == set()
    assert job(store, "b")["st"] == "enqueued"
    assert job(store, "c")["st"] == "blocked"
    assert store.settle([Settle("a", a.token, "ack")]) == []
    assert ids(claim(store)) == ["b"]
    assert job(store, "c")["st"] == "blocked"


def test_maintain_sweeps_more_groups_than_one_pass_takes(store, db):
    # 60 groups with a stale slot each: one pass visits 50, the next one the rest.
    for n in range(60):
        group = f"g{n:02d}"
        publish(store, f"{group}-a", concurrency_group=group, concurrency_limit=1)
        publish(store, f"{group}-b", concurrency_group=group, concurrency_limit=1)
    claim(store, max_jobs=200)
    assert len(in_state(db, "blocked")) == 60
    db.execute("UPDATE jobs SET state = 'canceled' WHERE id LIKE '%-a'")
    maintain(store)
    assert len(in_state(db, "blocked")) == 10
    maintain(store)
    assert in_state(db, "blocked") == []


# -- transient queues and bindings ------------------------------------------------------


def test_transient_queue_is_fifo_and_expires(store, db):
    assert store.pop_transient("r.pidbox") is None
    store.push_transient("r.pidbox", b"one")
    store.push_transient("r.pidbox", "two")
    assert store.transient_size("r.pidbox") == 2
    assert store.pop_transient("r.pidbox") == b"one"
    assert store.pop_transient("r.pidbox") == b"two"
    assert store.pop_transient("r.pidbox") is None
    for body in (b"x", b"y", b"z"):
        store.push_transient("other", body)
    assert store.purge_transient("other") == 3 and store.transient_size("other") == 0
    # A queue's messages expire 300 s after its last push.
    store.push_transient("old", b"stale")
    db.execute("UPDATE transient SET expires_ms = ? WHERE queue = 'old'", (now_ms() - 1,))
    assert store.transient_size("old") == 0 and store.pop_transient("old") is None


def test_bindings(store):
    store.bind("ex", "rk\x06\x16\x06\x16q1")
    store.bind("ex", "rk\x06\x16\x06\x16q2")
    store.bind("ex", "rk\x06\x16\x06\x16q2")
    assert sorted(store.bindings("ex")) == ["rk\x06\x16\x06\x16q1", "rk\x06\x16\x06\x16q2"]
    store.unbind("ex", "rk\x06\x16\x06\x16q1")
    assert store.bindings("ex") == ["rk\x06\x16\x06\x16q2"]
    assert store.bindings("none") == []


# -- idle wake-up -----------------------------------------------------------------------


def test_wait_returns_ready_work_at_once(store):
    publish(store, "a")
    assert store.wait([Q], [], timeout=5) == ("wake", Q, None)
    store.push_transient("x.pidbox", b"hello")
    assert store.wait([], ["x.pidbox"], timeout=5) == ("transient", "x.pidbox", b"hello")
    assert store.transient_size("x.pidbox") == 0
    assert store.wait([], [], timeout=5) is None


def test_idle_wait_lasts_its_timeout_despite_other_queues_work(store, make_store):
    other = make_store()
    started = time.monotonic()
    assert store.wait([Q], ["mine.pidbox"], timeout=0.3) is None
    assert time.monotonic() - started >= 0.29
    # Work for queues it does not wait for wakes it, but does not end the wait.
    timer = threading.Timer(0.1, lambda: publish(other, "elsewhere", queue="other-queue"))
    timer.start()
    started = time.monotonic()
    assert store.wait([Q], [], timeout=0.6) is None
    assert time.monotonic() - started >= 0.59
    timer.join()


def test_wait_wakes_for_a_scheduled_job_when_due(store, make_store):
    other = make_store()
    due_in = 0.4
    timer = threading.Timer(0.05, lambda: publish(other, "later",
                                                  eta_ms=now_ms() + int(due_in * 1000)))
    timer.start()
    started = time.monotonic()
    assert store.wait([Q], [], timeout=10) == ("wake", Q, None)
    elapsed = time.monotonic() - started
    timer.join()
    assert due_in <= elapsed + 0.01 < 5, elapsed
    assert ids(claim(store)) == ["later"]


def test_wait_wakes_for_a_transient_message_from_another_thread(store, make_store):
    other = make_store()
    timer = threading.Timer(0.1, lambda: other.push_transient("w.pidbox", b"ping"))
    timer.start()
    assert store.wait([Q], ["w.pidbox"], timeout=10) == ("transient", "w.pidbox", b"ping")
    timer.join()


def test_stale_wake_sockets_are_removed_and_close_cleans_up(make_store):
    waiter = make_store()
    waiter.wait([Q], [], timeout=0.01)
    wake_dir = Path(waiter.wake_dir)
    (sock,) = list(wake_dir.iterdir())
    # A socket left by a dead process: the next notification removes it.
    waiter.close()
    assert list(wake_dir.iterdir()) == []
    import socket as socket_module

    leftover = socket_module.socket(socket_module.AF_UNIX, socket_module.SOCK_DGRAM)
    leftover.bind(str(wake_dir / "999999-dead.sock"))
    leftover.close()
    assert [p.name for p in wake_dir.iterdir()] == ["999999-dead.sock"]
    publish(make_store(), "a")
    assert list(wake_dir.iterdir()) == []
    assert sock.name.startswith(f"{os.getpid()}-")


def _publish_later(path: str, go: Any, done: Any, trials: int) -> None:
    """Child process: on each ``go`` signal, publish one job and report when it started."""
    backend = SQLiteBackend(f"sqlite:///{path}")
    try:
        for n in range(trials):
            go.recv()
            started = time.time()
            backend.publish(NewJob(id=f"wake-{n}", queue=Q, message="m"))
            done.send(started)
    finally:
        backend.close()


def test_waiter_woken_within_50ms_of_a_publish_from_another_process(store, db_path):
    ctx = multiprocessing.get_context("spawn")
    go_parent, go_child = ctx.Pipe()
    done_parent, done_child = ctx.Pipe()
    trials = 7
    child = ctx.Process(target=_publish_later, args=(str(db_path), go_child, done_child, trials))
    child.start()
    latencies: list[float] = []
    try:
        for n in range(trials):
            woke: list[float] = []
            result: list[Any] = []

            def waiter(result: list[Any], woke: list[float]) -> None:
                result.append(store.wait([Q], [], timeout=10))
                woke.append(time.time())

            thread = threading.Thread(target=waiter, args=(result, woke))
            thread.start()
            wait_until(lambda: any(Path(store.wake_dir).glob("*.sock")), message="socket")
            time.sleep(0.05)  # let the waiter block (a publish before that is seen anyway)
            go_parent.send(n)
            assert done_parent.poll(30), "publisher did not report"
            started = done_parent.recv()
            thread.join(15)
            assert result == [("wake", Q, None)]
            latencies.append(woke[0] - started)
            got = claim(store).claims
            store.settle([Settle(c.job_id, c.token, "ack") for c in got])
    finally:
        child.join(30)
    assert child.exitcode == 0
    median = statistics.median(latencies)
    print(f"wake latency ms: {[round(x * 1000, 1) for x in latencies]} median {median * 1000:.1f}")
    assert median < 0.05, latencies


# -- several processes on one file -------------------------------------------------------

PUBLISHERS, PER_PUBLISHER, CLAIMERS = 4, 250, 2


def _publisher(path: str, n: int, out: str) -> None:
    """Child process: 250 publishes, some unique and some in a concurrency group."""
    record: dict[str, Any] = {"accepted": [], "duplicates": [], "error": None}
    backend = SQLiteBackend(f"sqlite:///{path}", lease_ms=60_000)
    try:
        for k in range(PER_PUBLISHER):
            extra: dict[str, Any] = {}
            if k % 5 == 0:
                extra = {"unique_lock": f"key{k % 20}", "unique_window": "running"}
            elif k % 7 == 0:
                extra = {"concurrency_group": f"grp{k % 3}", "concurrency_limit": 1}
            job_id = f"p{n}-{k}"
            outcome = backend.publish(NewJob(id=job_id, queue=Q, message=f"m{job_id}",
                                             priority=k % 3, **extra))
            if outcome.accepted:
                record["accepted"].append(job_id)
            else:
                record["duplicates"].append([job_id, outcome.holder_id])
    except BaseException:
        record["error"] = traceback.format_exc()
    finally:
        backend.close()
        Path(out).write_text(json.dumps(record))


def _claimer(path: str, n: int, stop: Any, out: str) -> None:
    """Child process: claim in batches and ack everything, settling with the next claim."""
    record: dict[str, Any] = {"done": [], "error": None}
    backend = SQLiteBackend(f"sqlite:///{path}", lease_ms=60_000)
    pending: list[Settle] = []
    try:
        while True:
            result = backend.claim([Q], f"claimer-{n}", 8, pending)
            pending = [Settle(c.job_id, c.token, "ack") for c in result.claims]
            record["done"] += [c.job_id for c in result.claims]
            if not result.claims and not pending:
                if stop.is_set():
                    break
                backend.wait([Q], [], timeout=0.2)
        backend.settle(pending)
    except BaseException:
        record["error"] = traceback.format_exc()
    finally:
        backend.close()
        Path(out).write_text(json.dumps(record))


def test_publishers_and_claimers_in_several_processes(store, db, tmp_path, db_path):
    ctx = multiprocessing.get_context("spawn")
    stop = ctx.Event()
    claimers = [ctx.Process(target=_claimer, args=(str(db_path), n, stop,
                                                    str(tmp_path / f"claimer{n}.json")))
                for n in range(CLAIMERS)]
    publishers = [ctx.Process(target=_publisher, args=(str(db_path), n,
                                                        str(tmp_path / f"pub{n}.json")))
                  for n in range(PUBLISHERS)]
    for proc in claimers:
        proc.start()
    # Both claimers idle in wait() before the first publish.
    wake_dir = Path(store.wake_dir)
    wait_until(lambda: len(list(wake_dir.glob("*.sock"))) >= CLAIMERS, timeout=60,
               message="claimers waiting")
    for proc in publishers:
        proc.start()
    try:
        for proc in publishers:
            proc.join(120)
            assert proc.exitcode == 0
        pubs = [json.loads((tmp_path / f"pub{n}.json").read_text()) for n in range(PUBLISHERS)]
        for pub in pubs:
            assert pub["error"] is None, pub["error"]
        accepted = {job_id for pub in pubs for job_id in pub["accepted"]}
        duplicates = [d for pub in pubs for d in pub["duplicates"]]
        assert len(accepted) + len(duplicates) == PUBLISHERS * PER_PUBLISHER
        wait_until(lambda: len(in_state(db, "completed")) == len(accepted), timeout=120,
                   interval=0.2, message="every accepted job completed")
    finally:
        stop.set()
        for proc in claimers:
            proc.join(60)
    for proc in claimers:
        assert proc.exitcode == 0
    runs = [json.loads((tmp_path / f"claimer{n}.json").read_text()) for n in range(CLAIMERS)]
    for run in runs:
        assert run["error"] is None, run["error"]
    done = [job_id for run in runs for job_id in run["done"]]
    assert sorted(done) == sorted(accepted), "a job was lost or claimed twice"
    assert set(in_state(db, "completed")) == accepted
    for job_id, holder_id in duplicates:
        assert holder_id in accepted and store.job(job_id) is None
    print("claimed per claimer:", [len(run["done"]) for run in runs])
    assert db.execute("SELECT COUNT(*) FROM slots").fetchone()[0] == 0
    assert holder(db, "key0") is None, "a completed job kept its running-window hold"
    assert stat(db, "deduplicated") == len(duplicates)
