"""SQLite-specific store tests: what only the SQLite backend has.

Every rule both backends share is proved by the conformance suite (tests/fast/conformance), through
the Backend interface only. Left here: the ``plus+sqlite:`` URL forms and their dispatch, the
WAL database with the documented tables, expiry done by the clock rather than by the store
(expired holds and transient messages are invisible at once and their rows are dropped by
maintenance), a forked child opening its own connection, the idle wake-up through Unix
datagram sockets (a waiter wakes when a scheduled job is due; stale sockets are removed; a
waiter is woken within 50 ms of a publish from another process), and one transaction per
change under several processes (4 publishers x 250 jobs, 2 claimers: every accepted job
completed exactly once, no "database is locked" escapes).
"""

from __future__ import annotations

import json
import os
import sqlite3
import statistics
import threading
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from celery.exceptions import ImproperlyConfigured

from celery_plus.model.options import StoreOptions
from celery_plus.model.store import NewJob, Settle
from celery_plus.stores.registry import open_store as make_transport_backend
from celery_plus.stores.sqlite.backend import SQLiteBackend
from celery_plus.stores.sqlite.url import sqlite_path
from tests.fast.conformance.support import Q, claim, ids, maintain, publish, wait_until
from tests.inspectors import inspector_for
from tests.support import in_forked_child, processes

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
        # The transport's backends reach the store when kombu connects, not before.
        assert not (tmp_path / "rel.db").exists()
        relative.connect()
        absolute.connect()
        assert (tmp_path / "rel.db").exists() and (tmp_path / "abs.db").exists()
    finally:
        relative.close()
        absolute.close()

def test_database_is_in_wal_mode_with_the_documented_tables(store, db):
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert {"jobs", "holds", "slots", "transient", "bindings", "meta"} <= tables

# -- expiry by the clock ------------------------------------------------------------------

def test_opening_a_connection_reads_no_job_rows_once_the_token_counter_exists(
        store: SQLiteBackend, db: sqlite3.Connection, db_path: Path) -> None:
    # Every connection runs the schema script; it seeded the token counter with MAX(token)
    # over every job each time (0.6 s per connection at a million jobs).
    publish(store, "seed")
    db.execute("WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 20000) "
               "INSERT INTO jobs (id, queue, name, msg, state, score, enqueued_ms) "
               "SELECT 'r' || n, 'q', 't', x'00', 'completed', n, 0 FROM g")
    steps = []
    conn = sqlite3.connect(db_path, isolation_level=None)
    conn.set_progress_handler(lambda: steps.append(1), 1000)  # a call per 1,000 VM steps
    try:
        SQLiteBackend._prepare(conn)
    finally:
        conn.close()
    assert len(steps) < 10, f"{len(steps) * 1000} VM steps to open a connection"


def test_a_store_without_the_token_counter_starts_it_above_every_token(
        store: SQLiteBackend, db: sqlite3.Connection, db_path: Path) -> None:
    publish(store, "old")
    db.execute("UPDATE jobs SET token = 500 WHERE id = 'old'")
    db.execute("DELETE FROM meta WHERE key = 'token'")  # a store of an earlier version
    reopened = SQLiteBackend(f"sqlite:///{db_path}", StoreOptions())
    try:
        publish(reopened, "new")
        db.execute("DELETE FROM jobs WHERE id = 'old'")
        [got] = claim(reopened).claims
        assert got.job_id == "new" and got.token > 500
    finally:
        reopened.close()


def test_expired_holds_and_transient_messages_vanish_and_maintenance_drops_their_rows(
        make_sqlite: Callable[..., SQLiteBackend], db: sqlite3.Connection) -> None:
    store = make_sqlite(backstop_ms=60_000)
    inspect = inspector_for(store)
    publish(store, "a", unique_lock="L", unique_window="pending")
    store.push_transient("old", b"stale")
    store.push_transient("live", b"fresh")
    past = store.now_ms() - 1
    db.execute("UPDATE holds SET expires_ms = ? WHERE lock = 'L'", (past,))
    db.execute("UPDATE transient SET expires_ms = ? WHERE queue = 'old'", (past,))
    # Expired rows count as absent at once...
    assert inspect.holder("L") is None and inspect.hold_deadline("L") is None
    assert store.transient_size("old") == 0 and store.pop_transient("old") is None
    assert inspect.transient_deadline("old") is None
    assert publish(store, "b", unique_lock="L2", unique_window="pending").accepted
    # ...and maintenance deletes them.
    assert db.execute("SELECT COUNT(*) FROM holds WHERE lock = 'L'").fetchone()[0] == 1
    maintain(store)
    assert db.execute("SELECT COUNT(*) FROM holds WHERE lock = 'L'").fetchone()[0] == 0
    assert db.execute("SELECT queue FROM transient").fetchall() == [("live",)]

# -- processes ------------------------------------------------------------------------------

def _publish_in_child(backend: SQLiteBackend) -> bool:
    """Forked child: use the parent's backend object (it must open its own connection)."""
    return backend.publish(NewJob(id="from-child", queue=Q, message="m")).accepted


def test_a_forked_child_opens_its_own_connection(store: SQLiteBackend) -> None:
    publish(store, "from-parent")
    assert in_forked_child(_publish_in_child, store) is True
    # The parent's connection still works and sees the child's job.
    assert ids(claim(store)) == ["from-parent", "from-child"]

# -- idle wake-up -----------------------------------------------------------------------

def test_wait_wakes_for_a_scheduled_job_when_due(store, make_sqlite):
    other = make_sqlite()
    due_in = 0.4
    timer = threading.Timer(0.05, lambda: publish(other, "later",
                                                  eta_ms=store.now_ms() + int(due_in * 1000)))
    timer.start()
    started = time.monotonic()
    assert store.wait([Q], [], timeout=10) == ("wake", Q, None)
    elapsed = time.monotonic() - started
    timer.join()
    assert due_in <= elapsed + 0.01 < 5, elapsed
    assert ids(claim(store)) == ["later"]

def test_stale_wake_sockets_are_removed_and_close_cleans_up(make_sqlite):
    waiter = make_sqlite()
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
    publish(make_sqlite(), "a")
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
    ctx = processes()
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
    backend = SQLiteBackend(f"sqlite:///{path}", StoreOptions(lease_ms=60_000))
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
    backend = SQLiteBackend(f"sqlite:///{path}", StoreOptions(lease_ms=60_000))
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
    inspect = inspector_for(store)
    ctx = processes()
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
        wait_until(lambda: len(inspect.ids_in_state("completed", limit=10_000)) == len(accepted),
                   timeout=120, interval=0.2, message="every accepted job completed")
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
    assert set(inspect.ids_in_state("completed", limit=10_000)) == accepted
    for job_id, holder_id in duplicates:
        assert holder_id in accepted and inspect.job(job_id) is None
    print("claimed per claimer:", [len(run["done"]) for run in runs])
    assert db.execute("SELECT COUNT(*) FROM slots").fetchone()[0] == 0
    assert inspect.holder("key0") is None, "a completed job kept its running-window hold"
    assert store.stats().get("deduplicated", 0) == len(duplicates)
