"""The SQLite result backend (``result_backend="plus+sqlite:///path.db"``).

Acceptance lines covered: results stored in a table of the same SQLite file (get/set/mget/
delete/expire), ``result_expires`` honoured (expired rows read as absent and are pruned),
``incr`` atomic across processes with ``implements_incr`` (chords use the counter path),
one connection per thread, retries on "database is locked", and the ``plus+`` result URL
alias dispatching to SQLite or to Celery's Redis backend.
"""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path
from typing import Any

import pytest
from celery.backends.redis import RedisBackend
from celery.exceptions import ImproperlyConfigured

import celery_plus  # noqa: F401  (registers the "plus" result backend alias)
from celery_plus import Celery
from celery_plus.result_backends import sqlite as sqlite_mod
from celery_plus.result_backends.sqlite import TABLE, SQLiteResultBackend
from celery_plus.stores.sqlite.url import sqlite_path
from tests.support import processes


def make_app(db: Path, **conf: Any) -> Celery:
    app = Celery("results", broker="plus+redis://127.0.0.1:6379/0",
                 backend=f"plus+sqlite:///{db}", set_as_current=False)
    app.conf.update(**conf)
    return app


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "store" / "results.db"


@pytest.fixture
def backend(db: Path) -> SQLiteResultBackend:
    backend = make_app(db).backend
    assert isinstance(backend, SQLiteResultBackend)
    return backend


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(sqlite_mod, "_now", clock)
    return clock


def rows(db: Path) -> dict[str, Any]:
    with sqlite3.connect(db) as conn:
        return {k: v for k, v in conn.execute(f"SELECT key, expires_at FROM {TABLE}")}


# -- URL and alias ------------------------------------------------------------------------
def test_plus_sqlite_url_selects_the_sqlite_backend_on_that_file(db: Path) -> None:
    backend = make_app(db).backend
    assert type(backend) is SQLiteResultBackend
    assert backend.path == str(db)
    assert backend.as_uri() == f"plus+sqlite:///{db}"
    assert backend.implements_incr
    # Chords count header results with incr: no chord_unlock task polling the results.
    assert backend.apply_chord == backend._apply_chord_incr


def test_plus_redis_url_is_celerys_redis_backend() -> None:
    app = Celery("r", broker="plus+redis://127.0.0.1:6379/0",
                 backend="plus+redis://127.0.0.1:6379/1", set_as_current=False)
    assert type(app.backend) is RedisBackend
    assert app.backend.connparams["db"] == 1


def test_unknown_inner_scheme_is_a_clear_error() -> None:
    app = Celery("r", broker="plus+redis://127.0.0.1:6379/0",
                 backend="plus+mongodb://localhost/x", set_as_current=False)
    with pytest.raises(ImproperlyConfigured, match=r"plus\+sqlite://"):
        app.backend  # noqa: B018


@pytest.mark.parametrize(("url", "path"), [
    ("sqlite:////abs/file.db", "/abs/file.db"),
    ("plus+sqlite:////abs/file.db", "/abs/file.db"),
    ("sqlite:///relative/file.db", "relative/file.db"),
    ("sqlite:////abs/file.db?mode=rw", "/abs/file.db"),
    ("sqlite:////abs/with%20space.db", "/abs/with space.db"),
])
def test_sqlite_path(url: str, path: str) -> None:
    assert sqlite_path(url, "result_backend", plain_path=False) == path


@pytest.mark.parametrize("url", ["redis://x", "sqlite://", "sqlite:///", "file.db",
                                 "sqlite://host/file.db", "sqlite:///:memory:"])
def test_sqlite_path_rejects_non_sqlite_urls(url: str) -> None:
    with pytest.raises(ImproperlyConfigured, match=f"result_backend '{url}'"):
        sqlite_path(url, "result_backend", plain_path=False)


# -- get / set / mget / delete --------------------------------------------------------------
def test_set_get_mget_delete(backend: SQLiteResultBackend, db: Path) -> None:
    assert backend.get(b"missing") is None
    backend.set(b"a", b"1")
    backend.set("b", "two")
    backend.set(b"a", b"one")  # overwrite
    assert backend.get(b"a") == b"one"
    assert backend.get(b"b") == b"two"
    assert backend.mget([b"a", b"missing", b"b"]) == [b"one", None, b"two"]
    backend.delete(b"a")
    assert backend.get(b"a") is None
    assert set(rows(db)) == {"b"}  # one table in the file named by the URL


def test_mget_of_many_keys_spans_several_queries(backend: SQLiteResultBackend) -> None:
    keys = [f"k{i}".encode() for i in range(1200)]
    for key in keys[::2]:
        backend.set(key, key)
    values = backend.mget(keys)
    assert values == [key if i % 2 == 0 else None for i, key in enumerate(keys)]


def test_task_results_round_trip_through_async_result(db: Path) -> None:
    app = make_app(db)
    app.backend.store_result("t-1", {"rows": 3}, "SUCCESS")
    app.backend.mark_as_failure("t-2", ValueError("bad input"))
    assert app.AsyncResult("t-1").get(timeout=1) == {"rows": 3}
    failed = app.AsyncResult("t-2")
    assert failed.state == "FAILURE"
    assert isinstance(failed.result, ValueError)
    assert app.AsyncResult("t-3").state == "PENDING"
    # A reader in another app (another process would be the same) sees the same rows.
    assert make_app(db).AsyncResult("t-1").result == {"rows": 3}


def test_group_results_are_saved_and_restored(db: Path) -> None:
    app = make_app(db)
    for tid in ("g-a", "g-b"):
        app.backend.store_result(tid, tid.upper(), "SUCCESS")
    group = app.GroupResult("grp", [app.AsyncResult("g-a"), app.AsyncResult("g-b")])
    group.save()
    restored = app.GroupResult.restore("grp")
    assert restored is not None
    assert [r.id for r in restored.results] == ["g-a", "g-b"]
    assert restored.join_native(timeout=1) == ["G-A", "G-B"]
    assert restored.get(timeout=1) == ["G-A", "G-B"]


# -- expiry ---------------------------------------------------------------------------------
def test_rows_expire_after_result_expires(db: Path, clock: Clock) -> None:
    backend = make_app(db, result_expires=60).backend
    backend.set(b"k", b"v")
    clock.now += 59
    assert backend.get(b"k") == b"v"
    clock.now += 2
    assert backend.get(b"k") is None
    assert backend.mget([b"k"]) == [None]
    assert backend.incr(b"k") == 1  # an expired value counts as absent


def test_result_expires_zero_keeps_rows_forever(db: Path, clock: Clock) -> None:
    backend = make_app(db, result_expires=0).backend
    backend.set(b"k", b"v")
    clock.now += 10 * 365 * 86400
    assert backend.get(b"k") == b"v"
    assert rows(db)["k"] is None


def test_failures_use_result_failure_expires(db: Path, clock: Clock) -> None:
    app = make_app(db, result_expires=3600, result_failure_expires=10)
    app.backend.mark_as_failure("bad", ValueError("x"))
    app.backend.store_result("good", 1, "SUCCESS")
    clock.now += 11
    assert app.AsyncResult("bad").state == "PENDING"
    assert app.AsyncResult("good").state == "SUCCESS"


def test_expire_sets_and_clears_a_deadline(backend: SQLiteResultBackend, clock: Clock) -> None:
    backend.set(b"k", b"v")
    backend.expire(b"k", 5)
    clock.now += 4
    assert backend.get(b"k") == b"v"
    backend.expire(b"k", 0)  # 0: never expires
    clock.now += 86400 * 30
    assert backend.get(b"k") == b"v"
    backend.expire(b"k", 1)
    clock.now += 2
    assert backend.get(b"k") is None


def test_expired_rows_are_pruned_lazily(db: Path, clock: Clock) -> None:
    backend = make_app(db, result_expires=10).backend
    for i in range(5):
        backend.set(f"old{i}".encode(), b"x")
    clock.now += 11
    backend._next_prune = 0.0  # the throttle would otherwise wait PRUNE_INTERVAL_S
    backend.set(b"new", b"y")  # a write triggers the (throttled) prune
    assert set(rows(db)) == {"new"}
    backend.set(b"newer", b"z")
    clock.now += 11
    assert backend.prune() == 2
    assert rows(db) == {}


# -- incr -----------------------------------------------------------------------------------
def test_incr_counts_from_one(backend: SQLiteResultBackend) -> None:
    assert [backend.incr(b"c") for _ in range(3)] == [1, 2, 3]
    assert backend.get(b"c") == b"3"
    backend.delete(b"c")
    assert backend.incr(b"c") == 1


def _incr_many(db: str, key: bytes, times: int, start: Any, out: Any) -> None:
    backend = make_app(Path(db)).backend
    start.wait(30)
    out.put([backend.incr(key) for _ in range(times)])


def test_incr_is_atomic_across_four_processes(db: Path, backend: SQLiteResultBackend) -> None:
    backend.set(b"other", b"untouched")
    ctx = processes()
    start, out = ctx.Event(), ctx.Queue()
    times = 150
    procs = [ctx.Process(target=_incr_many, args=(str(db), b"chord", times, start, out))
             for _ in range(4)]
    for proc in procs:
        proc.start()
    start.set()
    seen: list[int] = []
    for _ in procs:
        seen += out.get(timeout=60)
    for proc in procs:
        proc.join(timeout=30)
        assert proc.exitcode == 0
    # Every increment returned a distinct value: no two processes read the same count.
    assert sorted(seen) == list(range(1, 4 * times + 1))
    assert backend.get(b"chord") == str(4 * times).encode()
    assert backend.get(b"other") == b"untouched"


# -- connections and locking --------------------------------------------------------------
def test_one_connection_per_thread(backend: SQLiteResultBackend) -> None:
    mine = backend.conn
    assert backend.conn is mine
    other: list[sqlite3.Connection] = []
    thread = threading.Thread(target=lambda: other.append(backend.conn))
    thread.start()
    thread.join()
    assert other and other[0] is not mine
    assert mine.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert mine.execute("PRAGMA busy_timeout").fetchone()[0] >= 1000


def test_locked_database_is_retried(backend: SQLiteResultBackend) -> None:
    calls = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise sqlite3.OperationalError("database is locked")
        return "done"

    assert backend._retry(flaky) == "done"
    assert len(calls) == 3


def test_other_sqlite_errors_are_not_retried(backend: SQLiteResultBackend) -> None:
    calls = []

    def broken() -> None:
        calls.append(1)
        raise sqlite3.OperationalError("no such table: nope")

    with pytest.raises(sqlite3.OperationalError):
        backend._retry(broken)
    assert len(calls) == 1


def test_writes_wait_for_a_writer_holding_the_lock(backend: SQLiteResultBackend,
                                                   db: Path) -> None:
    backend.set(b"k", b"before")
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute(f"UPDATE {TABLE} SET value = ? WHERE key = ?", (b"held", "k"))
    done = threading.Event()

    def write() -> None:
        backend.incr(b"n")
        done.set()

    thread = threading.Thread(target=write)
    thread.start()
    assert not done.wait(0.3)  # blocked behind the other writer, not failed
    holder.execute("COMMIT")
    holder.close()
    assert done.wait(10)
    thread.join()
    assert backend.get(b"n") == b"1"
    assert backend.get(b"k") == b"held"
