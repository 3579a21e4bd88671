"""PostgreSQL-specific store rules (the rules every backend shares are in tests/fast/conformance).

Covers the PostgreSQL backend issue's store-level acceptance lines: the schema is created once
(one ``schema_migrations`` row per version) by 20 processes starting together, with no error;
two publisher processes racing 500 enqueues over the same 50 unique keys store exactly 50 jobs;
an idle ``wait`` is woken by LISTEN/NOTIFY at once (not by its timeout);
four concurrent ``FOR UPDATE SKIP LOCKED`` claimers never hand one job to two, and never
oversubscribe a concurrency group; the maintenance leader (``pg_try_advisory_lock``) runs
alone, a dead leader's lock frees and another worker takes over, a stuck leader is covered
after two missed intervals; ``publish_on`` writes in the caller's transaction (a rollback
leaves no job and no hold, the wake-up arrives at commit); a forked child never touches its
parent's sessions; ``celery-plus db migrate`` / ``db status``; the ``plus_pg_schema`` setting.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from celery.exceptions import ImproperlyConfigured

from celery_plus import settings
from celery_plus.model.options import StoreOptions
from celery_plus.model.store import NewJob, Settle
from celery_plus.stores.postgres import migrations as pg_migrations
from celery_plus.stores.postgres.backend import PostgresBackend
from celery_plus.stores.registry import open_store
from tests.fast.conformance.stores import PG_URL, backends_on_one_store
from tests.fast.conformance.support import Q, claim, ids, publish, record, wait_until
from tests.inspectors import inspector_for
from tests.support import celery_plus, drop_pg_schema, in_forked_child, processes

#: Spawned, not forked: a forked child runs kombu's after-fork clean-up of the connections an
#: earlier test left in this process, which can block on a socket forever.
PROCESSES = processes()


@pytest.fixture
def make_pg(tmp_path: Path) -> Iterator[Callable[..., PostgresBackend]]:
    """Open backends on the test's own schema (dropped afterwards)."""
    with backends_on_one_store("postgres", tmp_path) as make:
        yield make  # type: ignore[misc]


@pytest.fixture
def pg(make_pg: Callable[..., PostgresBackend]) -> PostgresBackend:
    return make_pg()


def query(backend: PostgresBackend, sql: str, *params: Any) -> list[Any]:
    """Rows of ``sql`` run in the backend's schema on a fresh connection."""
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"SET search_path TO {backend.qschema}")
        return list(conn.execute(sql, params).fetchall())


def run_processes(target: Callable[..., Any], args_list: list[tuple[Any, ...]],
                  timeout: float = 120) -> list[Any]:
    """Run ``target(*args, out)`` in new processes; each puts one result on ``out``."""
    out = PROCESSES.Queue()
    procs = [PROCESSES.Process(target=target, args=(*args, out)) for args in args_list]
    for proc in procs:
        proc.start()
    results = [out.get(timeout=timeout) for _ in procs]
    for proc in procs:
        proc.join(timeout=30)
        assert proc.exitcode == 0, f"a process exited with {proc.exitcode}"
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results


# -- schema creation -------------------------------------------------------------------------


def _migrate_at_once(schema: str, barrier: Any, out: Any) -> None:
    try:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            barrier.wait(timeout=60)
            applied = pg_migrations.migrate(conn, schema)
            backend = PostgresBackend(PG_URL, schema=schema)
            publish(backend, f"p{os.getpid()}")
            backend.close()
        out.put((len(applied.migrations), len(applied.functions)))
    except BaseException as exc:  # reported to the test process
        out.put(RuntimeError(f"{type(exc).__name__}: {exc}"))


def test_schema_is_created_once_by_20_processes_starting_together() -> None:
    schema = f"m{os.urandom(5).hex()}"
    barrier = PROCESSES.Barrier(20)
    try:
        applied = run_processes(_migrate_at_once, [(schema, barrier)] * 20)
        assert sum(m for m, _ in applied) == len(pg_migrations.migrations()), applied
        assert sum(f for _, f in applied) == len(pg_migrations.function_files()), applied
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            versions = conn.execute(
                f'SELECT version FROM "{schema}".schema_migrations ORDER BY version').fetchall()
            jobs = conn.execute(f'SELECT count(*) FROM "{schema}".jobs').fetchone()
        assert [v for (v,) in versions] == [m.version for m in pg_migrations.migrations()]
        assert jobs is not None and jobs[0] == 20, "every process could publish"
    finally:
        drop_pg_schema(PG_URL, schema)


# -- uniqueness across hosts -----------------------------------------------------------------


def _race_publishes(schema: str, name: str, barrier: Any, out: Any) -> None:
    try:
        backend = PostgresBackend(PG_URL, schema=schema)
        barrier.wait(timeout=60)
        accepted = []
        for i in range(500):
            outcome = publish(backend, f"{name}-{i}", unique_lock=f"key-{i % 50}",
                              unique_window="running")
            if outcome.accepted:
                accepted.append(outcome.job_id)
            else:
                assert outcome.holder_id is not None
        backend.close()
        out.put(accepted)
    except BaseException as exc:
        out.put(RuntimeError(f"{type(exc).__name__}: {exc}"))


def test_two_publisher_processes_racing_on_50_unique_keys_store_exactly_50_jobs(
        pg: PostgresBackend) -> None:
    barrier = PROCESSES.Barrier(2)
    results = run_processes(_race_publishes, [(pg.schema, "a", barrier),
                                              (pg.schema, "b", barrier)])
    accepted = [job_id for result in results for job_id in result]
    assert len(accepted) == 50
    stored = [row[0] for row in query(pg, "SELECT id FROM jobs")]
    assert sorted(stored) == sorted(accepted)
    holds = inspector_for(pg).holds()
    assert len(holds) == 50 and set(holds.values()) == set(accepted)
    assert pg.stats().get("deduplicated") == 950


# -- LISTEN / NOTIFY wake-ups ----------------------------------------------------------------


def _waiter(schema: str, samples: int, pipe: Any, out: Any) -> None:
    try:
        backend = PostgresBackend(PG_URL, schema=schema)
        backend.wait([Q], [], timeout=0.01)  # LISTEN connection open before measuring
        woke: list[float | None] = []
        for _ in range(samples):
            pipe.send("waiting")
            hit = backend.wait([Q], [], timeout=5)
            woke.append(time.time() if hit == ("wake", Q, None) else None)
            got = claim(backend).claims
            backend.settle([Settle(c.job_id, c.token, "ack") for c in got])
        backend.close()
        out.put(woke)
    except BaseException as exc:
        out.put(RuntimeError(f"{type(exc).__name__}: {exc}"))


def test_listen_notify_wakes_an_idle_waiter_at_once_not_by_polling(pg: PostgresBackend) -> None:
    samples = 25
    ours, theirs = PROCESSES.Pipe()
    out = PROCESSES.Queue()
    proc = PROCESSES.Process(target=_waiter, args=(pg.schema, samples, theirs, out))
    proc.start()
    published: list[float] = []
    try:
        publish(pg, "warm-up", queue="elsewhere")  # warm the publisher's pool connection
        for i in range(samples):
            assert ours.poll(30), "the waiter stopped"
            ours.recv()
            time.sleep(0.03)  # measurement protocol: let the waiter block in wait()
            published.append(time.time())
            publish(pg, f"j{i}")
        woke = out.get(timeout=60)
    finally:
        proc.join(timeout=30)
    assert not isinstance(woke, BaseException), woke
    assert None not in woke, "a wait ended without its job"
    latencies = [w - p for w, p in zip(woke, published, strict=True)]  # type: ignore[operator]
    # Without NOTIFY each wait would last its whole 5 s timeout. The latency itself (a few ms
    # on an idle machine) is a benchmark's figure, not a test's: this bound only tells a
    # wake-up from a timeout on a loaded machine.
    median = statistics.median(latencies)
    assert median < 0.25, f"median publish-to-wake {median * 1000:.1f} ms"
    assert max(latencies) < 2.5, "a wait ended by its timeout, not by NOTIFY"


def test_wake_up_of_a_callers_transaction_arrives_at_commit(
        make_pg: Callable[..., PostgresBackend]) -> None:
    waiter, publisher = make_pg(), make_pg()
    waiter.wait([Q], [], timeout=0.01)
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(waiter.wait([Q], [], timeout=10)))
    with psycopg.connect(PG_URL) as conn:  # autocommit off: an open transaction
        publisher.publish_on(conn, NewJob(id="tx", queue=Q, message="m"))
        thread.start()
        thread.join(timeout=0.5)
        assert thread.is_alive(), "woken before the commit"
        assert inspector_for(publisher).job("tx") is None, "visible before the commit"
        committed = time.monotonic()
        conn.commit()
        thread.join(timeout=10)
    assert result == [("wake", Q, None)]
    assert time.monotonic() - committed < 5
    assert record(publisher, "tx").state == "enqueued"


def test_publish_on_a_rolled_back_transaction_leaves_no_job_and_no_hold(
        pg: PostgresBackend) -> None:
    inspect = inspector_for(pg)
    with psycopg.connect(PG_URL) as conn:
        out = pg.publish_on(conn, NewJob(id="r", queue=Q, message="m", unique_lock="K",
                                         unique_window="running"))
        assert out.accepted
        conn.rollback()
    assert inspect.job("r") is None and inspect.holder("K") is None and inspect.holds() == {}
    # A duplicate inside a transaction sees the committed holder, and locks nothing.
    assert publish(pg, "h", unique_lock="K", unique_window="running").accepted
    with psycopg.connect(PG_URL) as conn:
        dup = pg.publish_on(conn, NewJob(id="d", queue=Q, message="m", unique_lock="K",
                                         unique_window="running"))
        assert not dup.accepted and dup.holder_id == "h"
        got = claim(pg).claims  # not blocked by the open transaction
        assert ids(claim(pg)) == [] and [c.job_id for c in got] == ["h"]
        pg.settle([Settle("h", got[0].token, "ack")])
        conn.commit()
    assert inspect.holder("K") is None and inspect.job("d") is None


# -- concurrent claimers ---------------------------------------------------------------------


def _claimer(schema: str, barrier: Any, out: Any) -> None:
    try:
        backend = PostgresBackend(PG_URL, schema=schema)
        barrier.wait(timeout=60)
        seen: list[str] = []
        pending: list[Settle] = []
        while True:
            got = backend.claim([Q], f"w{os.getpid()}", 5, pending).claims
            pending = [Settle(c.job_id, c.token, "ack") for c in got]
            seen += [c.job_id for c in got]
            if not got:
                break
        backend.close()
        out.put(seen)
    except BaseException as exc:
        out.put(RuntimeError(f"{type(exc).__name__}: {exc}"))


def test_skip_locked_claimers_never_hand_one_job_to_two(pg: PostgresBackend) -> None:
    pg.publish_many([NewJob(id=f"j{i:04d}", queue=Q, message="m") for i in range(2000)])
    barrier = PROCESSES.Barrier(4)
    results = run_processes(_claimer, [(pg.schema, barrier)] * 4)
    claimed = [job_id for result in results for job_id in result]
    assert len(claimed) == 2000 and len(set(claimed)) == 2000
    assert sum(1 for result in results if result) >= 2, "the claimers did not run together"
    assert query(pg, "SELECT count(*) FROM jobs WHERE state <> 'completed' OR deliveries <> 1") \
        == [(0,)], "a job was claimed twice or left unsettled"


def _group_claimer(schema: str, rounds: int, barrier: Any, out: Any) -> None:
    try:
        backend = PostgresBackend(PG_URL, schema=schema)
        taken: list[list[str]] = []
        for _ in range(rounds):
            barrier.wait(timeout=60)
            got = backend.claim([Q], f"w{os.getpid()}", 10).claims
            taken.append([c.job_id for c in got])
            barrier.wait(timeout=60)  # everyone has claimed: the round's slots are counted
            backend.settle([Settle(c.job_id, c.token, "ack") for c in got])
        backend.close()
        out.put(taken)
    except BaseException as exc:
        out.put(RuntimeError(f"{type(exc).__name__}: {exc}"))


def test_concurrent_claimers_never_oversubscribe_a_group(pg: PostgresBackend) -> None:
    for i in range(60):
        publish(pg, f"g{i:02d}", concurrency_group="g", concurrency_limit=3)
    rounds = 8
    barrier = PROCESSES.Barrier(4)
    results = run_processes(_group_claimer, [(pg.schema, rounds, barrier)] * 4)
    per_round = [sum(len(result[r]) for result in results) for r in range(rounds)]
    assert max(per_round) <= 3, f"more than 3 slots taken at once: {per_round}"
    assert min(per_round) >= 1, f"a round took no slot: {per_round}"
    claimed = [job_id for result in results for taken in result for job_id in taken]
    assert len(claimed) == len(set(claimed))
    assert inspector_for(pg).slot_holders("g") == set()


# -- maintenance leader ----------------------------------------------------------------------


def _lead_then_hang(schema: str, out: Any) -> None:
    backend = PostgresBackend(PG_URL, StoreOptions(maintenance_interval_ms=60_000), schema=schema)
    out.put(backend.maintain("leader") and backend.is_leader)
    time.sleep(600)  # killed by the test


def test_a_dead_leaders_lock_frees_and_another_worker_takes_over(
        make_pg: Callable[..., PostgresBackend]) -> None:
    other = make_pg(maintenance_interval_ms=60_000)
    out = PROCESSES.Queue()
    proc = PROCESSES.Process(target=_lead_then_hang, args=(other.schema, out))
    proc.start()
    try:
        assert out.get(timeout=60) is True
        assert other.maintain("w2") is False and not other.is_leader
    finally:
        proc.kill()
        proc.join(timeout=10)
    # The leader's session ends with its process: its advisory lock is free again.
    assert wait_until(lambda: other.maintain("w2") is False and other.is_leader,
                      timeout=15, message="leadership taken over")
    assert other.is_leader


def test_only_the_leader_runs_maintenance_and_a_stuck_one_is_covered(
        make_pg: Callable[..., PostgresBackend]) -> None:
    leader = make_pg(maintenance_interval_ms=1000)
    follower = make_pg(maintenance_interval_ms=1000)
    assert leader.maintain("w1") is True and leader.is_leader
    assert follower.maintain("w2") is False and not follower.is_leader
    # The leader runs a pass each interval...
    assert wait_until(lambda: leader.maintain("w1"), timeout=10, message="leader's next pass")
    ran = time.monotonic()
    # ...a follower only once the leader missed two intervals (alive but stuck), and it
    # does not become the leader by covering.
    assert wait_until(lambda: follower.maintain("w2"), timeout=15, message="covering pass")
    assert time.monotonic() - ran >= 2.0, "a follower ran while the leader was on time"
    assert not follower.is_leader and leader.is_leader


# -- fork safety, settings, CLI -------------------------------------------------------------


def _use_in_child(backend: PostgresBackend) -> str:
    publish(backend, f"child-{os.getpid()}")
    backend.close()
    return "ok"


def test_a_forked_child_never_touches_the_parents_sessions(pg: PostgresBackend) -> None:
    publish(pg, "parent-1")
    assert pg.wait([Q], [], timeout=1) == ("wake", Q, None)  # opens the listener
    assert pg.maintain("w") is True  # opens the maintenance (leader) connection
    listener = pg._tls.listener.info.backend_pid
    leader = pg._maint_conn.info.backend_pid
    assert [in_forked_child(_use_in_child, pg) for _ in range(3)] == ["ok"] * 3
    alive = {row[0] for row in query(pg, "SELECT pid FROM pg_stat_activity")}
    assert {listener, leader} <= alive, "a child ended one of the parent's sessions"
    publish(pg, "parent-2")
    assert pg.wait([Q], [], timeout=1) == ("wake", Q, None)
    assert pg._tls.listener.info.backend_pid == listener
    pg.maintain("w")
    assert pg.is_leader and pg._maint_conn.info.backend_pid == leader
    assert len(inspector_for(pg).ids_in_state("enqueued")) == 5


def test_plus_pg_schema_setting_is_validated_and_used() -> None:
    assert settings.resolve({}).pg_schema == "celery_plus"
    for bad in ("", "Upper", "1st", "a-b", "pg_x", "x" * 49, 3):
        with pytest.raises(ImproperlyConfigured, match="plus_pg_schema"):
            settings.resolve({"plus_pg_schema": bad})
    config = settings.resolve({"plus_pg_schema": "plus_settings_test"})
    backend = open_store(PG_URL, config)
    try:
        assert isinstance(backend, PostgresBackend) and backend.schema == "plus_settings_test"
        assert backend.size(Q) == 0
    finally:
        backend.close()
        drop_pg_schema(PG_URL, "plus_settings_test")


def test_plus_pg_synchronous_commit_setting_reaches_the_pooled_sessions(tmp_path: Path) -> None:
    assert settings.resolve({}).pg_synchronous_commit is None
    for bad in ("OFF", "no", False, 0):
        with pytest.raises(ImproperlyConfigured, match="plus_pg_synchronous_commit"):
            settings.resolve({"plus_pg_synchronous_commit": bad})
    schema = f"sc{os.urandom(4).hex()}"
    opted = open_store(PG_URL, settings.resolve(
        {"plus_pg_schema": schema, "plus_pg_synchronous_commit": "off"}))
    plain = open_store(PG_URL, settings.resolve({"plus_pg_schema": schema}))
    try:
        assert isinstance(opted, PostgresBackend) and isinstance(plain, PostgresBackend)

        def session_value(backend: PostgresBackend) -> str:
            return str(backend._value("SHOW synchronous_commit"))

        with psycopg.connect(PG_URL, autocommit=True) as conn:
            server = str(conn.execute("SHOW synchronous_commit").fetchone()[0])  # type: ignore[index]
        assert session_value(opted) == "off"
        assert session_value(plain) == server
        # The opted-in pool does the store's work as any other.
        publish(opted, "j1")
        claimed = claim(opted)
        assert ids(claimed) == ["j1"]
        opted.settle([Settle("j1", claimed.claims[0].token, "ack")])
        assert record(plain, "j1").state == "completed"
    finally:
        opted.close()
        plain.close()
        drop_pg_schema(PG_URL, schema)


def test_db_migrate_and_status_commands(capsys: pytest.CaptureFixture[str]) -> None:
    schema = f"cli{os.urandom(4).hex()}"
    target = ["--url", PG_URL, "--schema", schema]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return celery_plus(capsys, "db", *args, *target)

    try:
        before = run("status")
        assert before.returncode == 1 and "0001_initial  pending" in before.stdout
        first = run("migrate")
        assert first.returncode == 0 and "applied 0001_initial" in first.stdout, first.stderr
        again = run("migrate")
        assert again.returncode == 0 and "up to date" in again.stdout
        after = run("status")
        assert after.returncode == 0 and "0001_initial  applied" in after.stdout
        wrong = celery_plus(capsys, "db", "migrate", "--url", "redis://localhost:6379/0")
        assert wrong.returncode != 0 and "not a PostgreSQL store" in wrong.stderr
    finally:
        drop_pg_schema(PG_URL, schema)


def _blocked_signals(native_id: int) -> int:
    status = Path(f"/proc/self/task/{native_id}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines()
                    if line.startswith("SigBlk:")), 16)


def test_the_pool_threads_leave_every_signal_to_the_main_thread(pg: PostgresBackend) -> None:
    """psycopg_pool's threads block all signals, so a SIGTERM sent to a prefork pool process
    interrupts its main thread (celery_plus/runtime/helper_threads.py) and the caller's mask is
    back."""
    before = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    pg.now_ms()  # any call: the process's pool exists and its threads run
    threads = [t for t in threading.enumerate()
               if t.name.startswith(f"celery-plus:{pg.schema}") and t.native_id is not None]
    assert len(threads) >= 2, [t.name for t in threading.enumerate()]  # worker + scheduler
    for thread in threads:
        mask = _blocked_signals(thread.native_id)  # type: ignore[arg-type]
        assert mask & (1 << (signal.SIGTERM - 1)) and mask & (1 << (signal.SIGINT - 1)), \
            (thread.name, hex(mask))
    assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == before


def test_settle_decodes_a_detail_that_is_not_json_as_a_note(pg: PostgresBackend) -> None:
    """settle() reads details with safe_jsonb(): text no ``::jsonb`` cast accepts (or JSON
    that is not an object, or a NUL escape jsonb rejects) cannot abort the batch."""
    for job_id in "abcd":
        publish(pg, job_id)
    tok = {c.job_id: c.token for c in claim(pg).claims}
    rows = query(pg, "SELECT * FROM settle(%s::text[], %s::bigint[], %s::text[], %s::text[], "
                 "%s::bigint)", list("abcd"), [tok[i] for i in "abcd"],
                 ["fail", "fail", "fail", "ack"],
                 ["{not json", '"a string"', '{"exc_message": "nul \\u0000 escape"}', None],
                 pg.backstop_ms)
    assert sorted(rows) == [("a", "task failed"), ("b", "task failed"), ("c", "task failed")]
    assert record(pg, "a").exc_message == "failure details could not be decoded"
    assert record(pg, "c").exc_message == "failure details could not be decoded"
    assert record(pg, "d").state == "completed"


def test_a_start_is_stamped_when_it_is_recorded_not_before_its_wait_for_the_group(
        pg: PostgresBackend) -> None:
    """``rate_start`` stamps a start after it holds the rate group's lock: stamped before
    (when the call began), a start that waited for the lock counted from earlier than it
    was recorded, so its window closed that much early and let the next start in early — a
    task body starting after the stamp by more than the margin made 61+ starts in a window
    of ``"60/m"`` (the long run under load, PostgreSQL: 63)."""
    publish(pg, "r", rate_group="t:", rate_limit=5, rate_window_ms=60_000)
    [c] = claim(pg).claims
    with psycopg.connect(PG_URL) as holder:
        holder.execute(f"SET search_path TO {pg.qschema}")
        holder.execute("SELECT group_lock(rate_key('t:'))")  # held until the commit
        started = threading.Thread(target=pg.rate_started, args=(c.job_id, c.token))
        started.start()
        wait_until(lambda: query(pg, "SELECT count(*) FROM pg_locks WHERE locktype = "
                                     "'advisory' AND NOT granted AND classid::int = "
                                     "hashtext(current_schema())")[0][0] == 1,
                   timeout=10, message="rate_start waiting for the group's lock")
        time.sleep(0.3)  # the wait being measured, not a synchronisation
        [(released_at,)] = holder.execute("SELECT now_ms()").fetchall()
        holder.commit()
    started.join(timeout=10)
    [(at_ms,)] = query(pg, "SELECT at_ms FROM rate_claims WHERE started AND job_id = 'r'")
    assert at_ms >= released_at, (at_ms, released_at)


def test_a_settle_never_reads_the_lease_index_whatever_a_drain_left_in_it(
        pg: PostgresBackend) -> None:
    """settle() finds its rows by id: a scan of ``jobs_leases`` (partial on running jobs) would
    read every entry the drain's claims left there until VACUUM, so each settle of a long
    drain would cost more than the last (issue #29: 999 -> 645 jobs/s from 3,000 to 20,000)."""
    pg.publish_many([NewJob(id=f"j{i}", queue=Q, message="m" * 300) for i in range(2000)])
    settles: list[Settle] = []
    while got := pg.claim([Q], "w1", 50, settles).claims:
        settles = [Settle(c.job_id, c.token, "ack") for c in got]
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"ANALYZE {pg.qschema}.jobs")
    publish(pg, "last")
    last = claim(pg).claims[0]
    with psycopg.connect(PG_URL) as conn:  # one transaction: its own scan counts
        conn.execute(f"SET search_path TO {pg.qschema}")
        conn.execute("SELECT * FROM settle(ARRAY[%s, %s], ARRAY[%s, %s]::bigint[], "
                     "ARRAY['ack', 'ack'], ARRAY[NULL, NULL]::text[], 1000)",
                     [last.job_id, settles[0].job_id, last.token, settles[0].token])
        scans = conn.execute("SELECT pg_stat_get_xact_numscans('jobs_leases'::regclass)")
        assert scans.fetchone() == (0,)
    assert record(pg, "last").state == "completed"


@pytest.mark.parametrize("run_ms", [None, -1, 0, 3_600_000])
def test_an_ack_writes_its_job_once_with_its_start_mark(pg: PostgresBackend,
                                                        run_ms: int | None) -> None:
    """An ack is one row version: the start mark (how long the task ran) rides in the ack's
    own UPDATE (issue #29: a separate mark_start() UPDATE was a second version, and its WAL,
    per job drained), and lands as mark_start() would put it."""
    publish(pg, "a")
    [c] = claim(pg).claims
    [(claimed_ms,)] = query(pg, "SELECT started_ms FROM jobs WHERE id = 'a'")
    with psycopg.connect(PG_URL) as conn:  # one transaction: its own counts
        conn.execute(f"SET search_path TO {pg.qschema}")
        [(before_ms,)] = conn.execute("SELECT now_ms()").fetchall()
        conn.execute("SELECT * FROM settle(ARRAY[%s], ARRAY[%s]::bigint[], ARRAY['ack'], "
                     "ARRAY[NULL]::text[], 1000, ARRAY[%s]::bigint[])",
                     [c.job_id, c.token, run_ms])
        updated = conn.execute("SELECT pg_stat_get_xact_tuples_updated('jobs'::regclass)")
        assert updated.fetchone() == (1,)
    [(state, started_ms, start_mark)] = query(
        pg, "SELECT state, started_ms, start_mark FROM jobs WHERE id = 'a'")
    assert state == "completed"
    if run_ms is None:
        assert (started_ms, start_mark) == (claimed_ms, None)
    elif run_ms < 0:  # not started when last seen: the mark says so, the start stays
        assert (started_ms, start_mark) == (claimed_ms, -c.token)
    elif run_ms == 0:  # started as it was settled
        assert start_mark == c.token and started_ms >= before_ms >= claimed_ms
    else:  # started an hour before the settle: never before its claim
        assert (started_ms, start_mark) == (claimed_ms, c.token)


def test_a_store_statement_gives_its_connection_back_clean_whatever_it_did(
        pg: PostgresBackend) -> None:
    """``_rows`` takes a pool connection and gives it back without the pool's context: a
    statement that failed, and one that left a transaction open, still return their
    connection to the pool, idle and outside any transaction, and the next call uses it."""
    pg.now_ms()
    pool = pg._pool()
    with pytest.raises(psycopg.errors.DivisionByZero):
        pg._rows("SELECT 1 / 0")
    with pytest.raises(psycopg.ProgrammingError):  # BEGIN returns no rows to fetch
        pg._rows("BEGIN")  # and leaves its transaction open on the connection
    # (the pool may be opening one more connection meanwhile: it counts once it is in)
    wait_until(lambda: (s := pool.get_stats())["pool_available"] == s["pool_size"] >= 1,
               timeout=10, message="every connection back in the pool")
    conn = pool.getconn()
    try:
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    finally:
        pool.putconn(conn)
    assert pg._rows("SELECT txid_current_if_assigned() IS NULL") == [(True,)]
