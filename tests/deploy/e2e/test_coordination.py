"""Acceptance line 4: extensions on a non-plus broker, through the coordination store.

Real ``celery-plus worker`` processes consume from RabbitMQ (``amqp://``, one queue per test)
or plain Redis (``redis://``, kombu's own layout under a per-test key prefix), while a Redis or
PostgreSQL coordination store (per-test key prefix / schema) holds the job records. Proven
here: the uniqueness windows (running, pending, ttl) — a duplicate sent while the holder runs
coalesces and the body runs once; per-key concurrency (at most 2 per key at any instant, keys
in parallel); a failing task is a dead letter in ``celery_plus.admin`` and ``celery-plus dlq
ls``, and an admin retry publishes it to the broker again; a ``kill -9`` of a worker frees its
slots once its leases expire, its jobs run again and its holds end with them; a worker refuses
to start when extension options would go unenforced.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import redis
from kombu import Connection, Exchange, Queue

from celery_plus import admin
from celery_plus.coordination import coordinator_for
from celery_plus.model.store import Backend
from celery_plus.stores.registry import admin_for
from tests.fast.conformance.stores import PG_URL
from tests.inspectors import inspector_for
from tests.support import drop_pg_schema

from . import coordination_proj, proj
from .conftest import CELERY_PLUS, ROOT, Worker, wait_until
from .proj import events

AMQP_URL = os.environ.get("PLUS_TEST_AMQP", "amqp://guest:guest@127.0.0.1:5672//")
APP = "tests.deploy.e2e.coordination_proj"
LEASE_S = 2.0


@dataclass(frozen=True)
class Setup:
    broker: str
    store: str


def _amqp_cleanup(prefix: str) -> None:
    with Connection(AMQP_URL) as conn:
        channel = conn.channel()
        Queue(prefix, Exchange(prefix), channel=channel).delete()
        Exchange(prefix, channel=channel).delete()


@pytest.fixture
def setup(request: pytest.FixtureRequest, prefix: str,
          monkeypatch: pytest.MonkeyPatch) -> Iterator[Setup]:
    """(broker, store) of the test: ``amqp`` or ``redis``, ``redis`` or ``postgres``; exported
    to the client app and the workers."""
    chosen = Setup(*getattr(request, "param", ("amqp", "redis")))
    monkeypatch.setenv("PLUS_TEST_BROKER", AMQP_URL if chosen.broker == "amqp" else proj.REDIS_URL)
    monkeypatch.setenv(coordination_proj.COORDINATION_ENV,
                       PG_URL if chosen.store == "postgres" else proj.REDIS_URL)
    monkeypatch.setenv("PLUS_TEST_VT", str(LEASE_S))
    yield chosen
    if chosen.broker == "amqp":
        _amqp_cleanup(prefix)
    if chosen.store == "postgres":
        drop_pg_schema(PG_URL, proj.pg_schema(prefix))


@pytest.fixture
def app(setup: Setup, prefix: str) -> Iterator[Any]:
    client = coordination_proj.make_app(prefix)
    yield client
    coordinator = coordinator_for(client)
    if coordinator is not None:
        coordinator.close()
    client.close()


@pytest.fixture
def view(app: Any) -> Iterator[Backend]:
    """A backend on the test's coordination store, for assertions on its records."""
    coordinator = coordinator_for(app)
    assert coordinator is not None, "the app is in coordinated mode"
    backend = coordinator.open_backend()
    yield backend
    backend.close()


@pytest.fixture
def start(setup: Setup, start_worker: Callable[..., Worker]) -> Callable[..., Worker]:
    """Start a real ``celery-plus worker -A tests.deploy.e2e.coordination_proj`` (threads pool)."""

    def run(concurrency: int = 4, env: dict[str, str] | None = None,
            ready: bool = True) -> Worker:
        return start_worker(pool="threads", concurrency=concurrency, env=env, ready=ready,
                            app=APP)

    return run


def _state(view: Backend, task_id: str) -> str | None:
    return (inspector_for(view).job(task_id) or {}).get("st")


def _starts(prefix: str, key: str) -> list[dict[str, Any]]:
    return [e for e in events(prefix, "start") if e.get("key") == key]


def _peak(starts: list[dict[str, Any]], ends: list[dict[str, Any]]) -> int:
    """Most jobs running at one instant (an end before a start at the same time)."""
    points = sorted([(e["t"], 1) for e in starts] + [(e["t"], -1) for e in ends])
    running = peak = 0
    for _, delta in points:
        running += delta
        peak = max(peak, running)
    return peak


STORES = [("amqp", "redis"), ("amqp", "postgres")]
STORE_IDS = ["amqp-redis", "amqp-postgres"]


@pytest.mark.parametrize("setup", STORES, indirect=True, ids=STORE_IDS)
def test_uniqueness_windows_coalesce_duplicates_through_the_store(
        app: Any, view: Backend, start: Callable[..., Worker], prefix: str) -> None:
    running, pending = app.tasks["proj.unique_running"], app.tasks["proj.unique_pending"]
    ttl = app.tasks["proj.unique_ttl"]
    # pending: sent before any worker runs; a duplicate coalesces while it waits.
    waiting = pending.delay("p", 1.5)
    assert waiting.deduplicated is False
    assert pending.delay("p", 1.5).deduplicated is True
    # An admin cancel before a worker sees it: its message is dropped unrun when it arrives.
    canceled = running.delay("c", 0.1)
    assert admin.cancel(app, canceled.id).changed
    worker = start()
    # running: a duplicate while the holder runs coalesces into it.
    holder = running.delay("r", 1.0)
    wait_until(lambda: _starts(prefix, "r"), timeout=20, message="holder started")
    dup = running.delay("r", 1.0)
    assert holder.deduplicated is False
    assert dup.deduplicated is True and dup.id == holder.id
    # A retried job keeps its key across the retries (they continue the same job).
    flaky = app.tasks["proj.flaky"].delay("f", 3)
    wait_until(lambda: [e for e in events(prefix, "attempt") if e["key"] == "f"], timeout=20,
               message="flaky's first attempt")
    assert app.tasks["proj.flaky"].delay("f", 3).id == flaky.id
    # An expired delivery never runs: its job is canceled and its key released.
    expired = running.apply_async(("x", 0.1), countdown=1.5, expires=1.0)
    # pending: once the holder started, the key is free again.
    wait_until(lambda: _starts(prefix, "p"), timeout=20, message="pending holder started")
    after_start = pending.delay("p", 0.1)
    assert after_start.deduplicated is False and after_start.id != waiting.id
    # ttl: held for 2 s from the send, even after the job completed.
    first = ttl.delay("t")
    assert first.get(timeout=20) == "t"
    assert ttl.delay("t").deduplicated is True
    assert holder.get(timeout=20) == "r"
    # The result is stored before the delivery is acknowledged (and its claim settled).
    wait_until(lambda: _state(view, holder.id) == "completed", timeout=10,
               message="holder settled")
    lock = (inspector_for(view).job(holder.id) or {})["uk"]
    assert inspector_for(view).holder(lock) is None, "the running window ends with the job"
    again = running.delay("r", 1.0)
    assert again.deduplicated is False and again.get(timeout=20) == "r"
    wait_until(lambda: ttl.delay("t").deduplicated is False, timeout=10, interval=0.2,
               message="the ttl hold lapsed")
    after_start.get(timeout=20)
    assert flaky.get(timeout=20) == 3
    assert [e["attempt"] for e in events(prefix, "attempt") if e["key"] == "f"] == [1, 2, 3]
    wait_until(lambda: _state(view, expired.id) == "canceled", timeout=20,
               message="the expired job canceled")
    assert inspector_for(view).holder((inspector_for(view).job(expired.id) or {})["uk"]) is None
    assert _starts(prefix, "x") == []
    wait_until(lambda: f"[{canceled.id}] is canceled in the coordination store" in worker.log(),
               timeout=10, message="the canceled job's delivery dropped")
    assert _starts(prefix, "c") == [] and _state(view, canceled.id) == "canceled"
    assert len(_starts(prefix, "r")) == 2, "holder + the send after it finished; never the dup"
    assert len(_starts(prefix, "p")) == 2
    assert _state(view, holder.id) == "completed" and _state(view, waiting.id) == "completed"


@pytest.mark.parametrize("setup", [("amqp", "redis"), ("redis", "redis")], indirect=True,
                         ids=["amqp-redis", "redisbroker-redis"])
def test_per_key_concurrency_limits_each_key_and_runs_keys_in_parallel(
        app: Any, view: Backend, start: Callable[..., Worker], prefix: str,
        store: redis.Redis) -> None:
    task = app.tasks["proj.per_customer"]
    customers, per_customer, seconds = ("acme", "globex"), 5, 0.4
    results = [task.delay(c, n, seconds) for n in range(per_customer) for c in customers]
    start(concurrency=6)
    assert [r.get(timeout=40) for r in results] == [
        n for n in range(per_customer) for _ in customers]
    starts = events(prefix, "start")
    assert sorted((e["customer"], e["n"]) for e in starts) == sorted(
        (c, n) for c in customers for n in range(per_customer)), "each job ran once"
    for customer in customers:
        peak = max(e["running"] for e in starts if e["customer"] == customer)
        assert peak == 2, f"{customer}: {peak} running at once"
        group = f'proj.per_customer:"{customer}"'
        # The result is stored before the gate settles the claim: await the slot's release.
        wait_until(lambda group=group: inspector_for(view).slot_holders(group) == set(), timeout=10,
                   message=f"{group}'s slots released")
        assert int(store.get(f"{prefix}:running:{customer}") or 0) == 0
    assert _peak(starts, events(prefix, "end")) > 2, "the two keys ran in parallel"
    wait_until(lambda: all(_state(view, r.id) == "completed" for r in results), timeout=10,
               message="all completed in the store")
    assert view.stats().get("blocked", 0) > 0, "some deliveries found their group full"


def _dlq_ls(prefix: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CELERY_PLUS, "dlq", "ls", "-A", APP], cwd=ROOT, text=True,
                          capture_output=True, timeout=60,
                          env={**os.environ, "PLUS_TEST_PREFIX": prefix})


@pytest.mark.parametrize("setup", STORES, indirect=True, ids=STORE_IDS)
def test_a_failure_is_a_dead_letter_in_the_admin_and_a_retry_republishes_it(
        app: Any, view: Backend, start: Callable[..., Worker], prefix: str,
        store: redis.Redis) -> None:
    worker = start()
    failing = app.tasks["proj.fail_until_fixed"].delay("inv-7")
    wait_until(lambda: _state(view, failing.id) == "failed", timeout=30,
               message="dead-lettered")
    # a coordinated worker keeps its record in the coordination store too (the admin's
    # workers page), and its maintenance turn records the queue history (issue #28)
    wait_until(lambda: worker.proc.pid in [b.pid for b in view.worker_beats()], timeout=30,
               message="the worker's record")
    history: Any = admin_for(view)
    wait_until(lambda: history.history_rows(0, 2**62), timeout=30,
               message="a queue history sample")
    page = admin.jobs(app, "failed")
    assert [j.id for j in page.items] == [failing.id]
    detail = admin.show(app, failing.id)
    assert detail.summary.exc_type == "RuntimeError"
    assert detail.summary.exc_message == "inv-7 is not fixed yet"
    assert "fail_until_fixed" in detail.traceback and "RuntimeError" in detail.traceback
    assert detail.summary.name == "proj.fail_until_fixed" and detail.args == ["inv-7"]
    listed = _dlq_ls(prefix)
    assert listed.returncode == 0, listed.stderr
    assert failing.id in listed.stdout and "not fixed yet" in listed.stdout

    store.set(f"{prefix}:fixed:inv-7", "1")
    result = admin.retry(app, failing.id)
    assert result.changed and result.state == "enqueued"
    wait_until(lambda: _state(view, failing.id) == "completed", timeout=30,
               message="the retried job completed")
    assert [e["key"] for e in events(prefix, "fixed")] == ["inv-7"], "ran once after the retry"
    assert admin.jobs(app, "failed").total == 0
    assert not admin.retry(app, failing.id).changed, "a second retry is a no-op"


def test_a_job_sent_without_the_store_is_recorded_by_the_worker(
        app: Any, view: Backend, start: Callable[..., Worker], prefix: str,
        caplog: pytest.LogCaptureFixture) -> None:
    inspect = inspector_for(view)
    worker = start()
    plain = proj.make_app(prefix)  # same broker and queue, no plus_coordination_url
    plain.conf.task_default_queue = prefix
    try:
        with caplog.at_level(logging.WARNING, logger="celery_plus.coordination"):
            sent = plain.tasks["proj.fail_until_fixed"].delay("adopted")
    finally:
        plain.close()
    assert "not enforced" in caplog.text, "the plain client says its options do nothing"
    wait_until(lambda: _state(view, sent.id) == "failed", timeout=30,
               message="the adopted job dead-lettered")
    assert (inspect.job(sent.id) or {}).get("uk", "") == "", "uniqueness is decided at the send"
    assert admin.show(app, sent.id).summary.exc_message == "adopted is not fixed yet"
    assert "has no record in the coordination store" in worker.log()


def test_while_the_store_is_unreachable_deliveries_wait_on_the_broker(
        setup: Setup, start: Callable[..., Worker], prefix: str) -> None:
    worker = start(env={coordination_proj.COORDINATION_ENV: "redis://127.0.0.1:1/0"})
    plain = proj.make_app(prefix)  # a client that does not use the store
    plain.conf.task_default_queue = prefix
    try:
        plain.tasks["proj.per_customer"].delay("down", 0, 0.1)
    finally:
        plain.close()
    wait_until(lambda: worker.log().count("delivery given back") >= 2, timeout=30,
               message="the delivery given back to the broker, twice")
    assert events(prefix, "start") == [], "nothing runs unchecked"
    assert worker.proc.poll() is None


def test_a_killed_worker_frees_its_slots_when_its_leases_expire(
        app: Any, view: Backend, start: Callable[..., Worker], prefix: str) -> None:
    inspect = inspector_for(view)
    per_customer, unique = app.tasks["proj.per_customer"], app.tasks["proj.unique_running"]
    doomed = start()
    first = [per_customer.delay("k", n, 2.0) for n in range(2)]
    held = unique.delay("u", 2.0)
    wait_until(lambda: len(events(prefix, "start")) == 3, timeout=20,
               message="both slots and the unique job taken")
    third = per_customer.delay("k", 2, 0.2)
    group = 'proj.per_customer:"k"'
    assert inspect.slot_holders(group) == {r.id for r in first}
    doomed.kill()
    killed_at = time.time()
    # The dead worker's claims keep their slots until their leases expire (nothing else runs
    # in the group meanwhile), and the unique key stays with its unfinished job.
    assert unique.delay("u", 2.0).id == held.id
    start()
    assert [r.get(timeout=40) for r in [*first, third]] == [0, 1, 2]
    assert held.get(timeout=40) == "u"
    reruns = [e for e in events(prefix, "start") if e["t"] > killed_at]
    assert min(e["t"] for e in reruns) - killed_at >= LEASE_S * 0.5, (
        "a held job waits for the dead worker's lease")
    assert sorted(e.get("n", -1) for e in reruns) == [-1, 0, 1, 2]
    # (The tasks' own counter still counts the two killed runs: compare intervals instead.)
    ends = [e for e in events(prefix, "end") if e["t"] > killed_at and "customer" in e]
    assert _peak([e for e in reruns if "customer" in e], ends) <= 2
    for r in first:
        assert (inspect.job(r.id) or {}).get("dl") == "2", "delivered again after the recovery"
    # A result is stored before the coordinator's settle frees the slot: await the settle.
    wait_until(lambda: inspect.slot_holders(group) == set(), timeout=10,
               message="the group's slots freed")
    assert all(_state(view, r.id) == "completed" for r in [*first, third, held])
    assert inspect.holds() == {}
    assert view.stats().get("recovered", 0) >= 3


@pytest.mark.parametrize("setup", STORES, indirect=True, ids=STORE_IDS)
def test_a_worker_frozen_past_its_lease_leaves_no_ghost_record(
        app: Any, view: Backend, start: Callable[..., Worker], prefix: str) -> None:
    """Issue #11 defect 8: the broker delivered the job to a worker that then stalled past its
    lease; another worker's maintenance recovered the record. Its record ends finished, its
    key released: a new job of the same key runs. Before, the record stayed ``enqueued``
    holding the key for the backstop. Since issue #27 the stalled run does not go on past its
    lease once the worker thaws: the worker (threads pool) exits (its lease watch, code 75, or
    its guard process, SIGKILL), the broker delivers the job again and it runs once more."""
    unique = app.tasks["proj.unique_running"]
    frozen = start(concurrency=1)
    job = unique.delay("ghost", 4.0)
    wait_until(lambda: _starts(prefix, "ghost"), timeout=20, message="the job started")
    os.killpg(frozen.proc.pid, signal.SIGSTOP)
    try:
        start(concurrency=1)  # its keeper recovers the frozen worker's lease
        wait_until(lambda: _state(view, job.id) == "enqueued", timeout=30,
                   message="the frozen worker's lease recovered")
    finally:
        os.killpg(frozen.proc.pid, signal.SIGCONT)
    assert frozen.proc.wait(timeout=30) in (75, -signal.SIGKILL), frozen.log()
    wait_until(lambda: _state(view, job.id) == "completed", timeout=30,
               message="the record finished")
    assert job.get(timeout=20) == "ghost"
    assert inspector_for(view).holds() == {} and inspector_for(view).ids_in_state("enqueued") == []
    again = unique.delay("ghost", 4.0)
    assert again.deduplicated is False and again.id != job.id
    assert again.get(timeout=40) == "ghost"
    assert len(_starts(prefix, "ghost")) == 3  # the stopped run, its re-run, the new job


def test_a_worker_without_a_coordination_store_refuses_unenforced_options(
        setup: Setup, start: Callable[..., Worker]) -> None:
    worker = start(env={coordination_proj.COORDINATION_ENV: ""}, ready=False)
    worker.proc.wait(timeout=60)
    assert worker.proc.returncode != 0
    error = [line for line in worker.log().splitlines() if "ImproperlyConfigured: " in line]
    assert error, worker.log()
    assert "declare celery-plus extension options" in error[-1]
    assert "proj.per_customer" in error[-1] and "plus_coordination_url is not set" in error[-1]
