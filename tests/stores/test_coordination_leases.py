"""Issue #27 in coordination mode: the coordination store's claims under the lease rule.

* The coordinator's claims are in the process's holdings (the lease watch's one ledger): a
  claim not confirmed within ``SURE_SHARE`` of its lease is overdue, and the watch kills the
  pool process running it (found by the claim's tag, not the broker's delivery tag).
* A coordinated task whose claim is no longer certain asks the store before it starts: a
  live claim starts (and is renewed), a lost one does not, and a store that cannot answer
  means do not start (fail closed).
* A coordination store refusing writes (Redis OOM and READONLY, PostgreSQL 25006) is retried
  by the coordination keeper, which never dies of it; the claim is confirmed again once the
  store writes.

Real stores: the shared Redis and PostgreSQL under a prefix / schema of the test's own, a
private ``redis-server`` or a database of the test's own for the refusals.
"""

from __future__ import annotations

import logging
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from celery.worker import state

from celery_plus import Celery
from celery_plus.coordination import coordinator_for
from celery_plus.coordination.coordinator import Coordinator
from celery_plus.coordination.keeper import CoordinationKeeper
from celery_plus.coordination.start_check import (
    COORDINATED_SURE_UNTIL,
    claim_lost,
    coordinated_claim,
)
from celery_plus.leases import holdings
from celery_plus.leases.deadline import LeaseWatch
from celery_plus.leases.holdings import SURE_SHARE
from celery_plus.leases.keeper import clock
from celery_plus.leases.start_check import LeaseUnknown
from celery_plus.leases.tokens import LEASE_HEADER, delivery_tag
from celery_plus.model.store import NewJob, Settle
from celery_plus.runtime.worker_state import running_tags
from celery_plus.worker import thaw_guard
from tests.fast.conformance.stores import PG_URL, REDIS_URL
from tests.fast.unit.test_admin_cli import drop_store
from tests.redis_servers import redis_server
from tests.support import set_pg_read_only, wait_until

AMQP = "amqp://guest:guest@127.0.0.1:5672//"
LEASE_S = 0.6
ROOMY_LEASE_S = 4.0


def _coordinator(url: str, name: str, lease_s: float = LEASE_S,
                 heartbeat_s: float = 0.1) -> Coordinator:
    app = Celery("coordination_leases", broker=AMQP, set_as_current=False)
    app.conf.update(plus_coordination_url=url, plus_key_prefix=name, plus_pg_schema=name,
                    plus_visibility_timeout=lease_s, plus_heartbeat_interval=heartbeat_s,
                    plus_maintenance_interval=60.0)
    found = coordinator_for(app)
    assert found is not None
    return found


def _store_coordinator(store: str, lease_s: float) -> Iterator[Coordinator]:
    name = f"c{uuid.uuid4().hex[:10]}"
    found = _coordinator(REDIS_URL if store == "redis" else PG_URL, name, lease_s)
    try:
        yield found
    finally:
        found.close()
        drop_store(store, name)


@pytest.fixture(params=["redis", "postgres"])
def coordinator(request: pytest.FixtureRequest) -> Iterator[Coordinator]:
    yield from _store_coordinator(request.param, LEASE_S)


@pytest.fixture(params=["redis", "postgres"])
def roomy_coordinator(request: pytest.FixtureRequest) -> Iterator[Coordinator]:
    """A lease long enough that a loaded machine's claim-to-first-look stays in its sure share."""
    yield from _store_coordinator(request.param, ROOMY_LEASE_S)


def _claimed(coordinator: Coordinator, job_id: str = "a") -> int:
    assert coordinator.publish(NewJob(id=job_id, queue="q", message="m")).accepted
    got = coordinator.claim(job_id)
    assert got.outcome == "claimed"
    return got.token


class RunningRequest(SimpleNamespace):
    """A request Celery runs (its set of them is weak: a plain namespace will not do)."""

    __hash__ = object.__hash__


def test_a_coordinated_run_past_its_sure_share_is_killed_by_the_lease_watch(
        roomy_coordinator: Coordinator, monkeypatch: pytest.MonkeyPatch) -> None:
    coordinator = roomy_coordinator
    # The watch looks at every holdings of the process: only this test's (an earlier test's
    # closed coordinator may still hold an overdue claim of the same tag).
    monkeypatch.setattr(holdings, "_registry", {
        key: book for key, book in holdings._registry.items() if book is coordinator.holdings})
    token = _claimed(coordinator)
    tag = delivery_tag("a", token)
    assert holdings.every() == [coordinator.holdings]  # the watch's ledger, not a copy
    sure = coordinator.holdings.sure_until(tag)
    assert sure is not None and sure <= clock() + ROOMY_LEASE_S * SURE_SHARE
    child = subprocess.Popen(["sleep", "60"])  # stands in for the pool process running it
    request = RunningRequest(
        plus_claim=SimpleNamespace(tag=tag), message=SimpleNamespace(delivery_tag=7),
        time_start=1.0, acknowledged=False, worker_pid=child.pid, name="t", id="a")
    state.active_requests.add(request)  # type: ignore[arg-type]
    try:
        assert running_tags() == {tag: request}  # by its claim, not the broker's tag 7
        watch = LeaseWatch(None)
        watch.look()
        assert child.poll() is None  # still certainly ours: left alone

        stopped_at: list[float] = []

        def looked_and_stopped() -> bool:  # the watch thread's ticks, a stall would be a freeze
            at = clock()
            watch.look()
            if tag in watch._stopped:
                stopped_at.append(at)
            return bool(stopped_at)

        wait_until(looked_and_stopped, timeout=ROOMY_LEASE_S + 5, interval=0.02,
                   message="the run stopped")
        assert stopped_at[0] >= sure  # the look that stopped it: its sure share had passed
        assert child.wait(timeout=5) == -9  # SIGKILL, before the store's deadline
    finally:
        state.active_requests.discard(request)  # type: ignore[arg-type]
        child.kill()
        child.wait()


def _task_request(job_id: str, token: int, sure_until: float) -> Any:
    return SimpleNamespace(id=job_id, **{LEASE_HEADER: token, COORDINATED_SURE_UNTIL: sure_until})


def test_a_coordinated_task_checks_its_claim_before_it_starts(
        coordinator: Coordinator, monkeypatch: pytest.MonkeyPatch) -> None:
    token = _claimed(coordinator)
    tag = delivery_tag("a", token)
    app = coordinator.app
    assert coordinated_claim(SimpleNamespace(id="a", **{LEASE_HEADER: token})) is None
    assert coordinated_claim(_task_request("a", token, 5.0)) == ("a", token, 5.0)
    # Certain (this process's holdings confirm it): no store call.
    monkeypatch.setattr(coordinator.backend, "heartbeat", _unreachable)
    assert claim_lost(app, "a", token, float("-inf")) is False
    # Not certain any more, the store unreachable: do not start.
    wait_until(lambda: clock() >= (coordinator.holdings.sure_until(tag) or 0), timeout=5,
               interval=0.02, message="sure share")
    with pytest.raises(LeaseUnknown, match="could not check the lease of job a"):
        claim_lost(app, "a", token, float("-inf"))
    monkeypatch.undo()
    # The store answers: live, so it starts, and the answer renewed it.
    before = coordinator.holdings.sure_until(tag) or 0
    assert claim_lost(app, "a", token, float("-inf")) is False
    assert (coordinator.holdings.sure_until(tag) or 0) > before
    # Recovered meanwhile (its lease lapsed): lost, it does not start.
    wait_until(lambda: coordinator.backend.recover(), timeout=10, message="lease recovery")
    assert claim_lost(app, "a", token, float("-inf")) is True


def test_a_pool_process_renews_the_coordinated_claim_it_runs_and_stops_it_once_lost(
        coordinator: Coordinator, monkeypatch: pytest.MonkeyPatch) -> None:
    """The pool-side renewal (``worker/thaw_guard.py``) of a claim in the coordination store,
    as a prefork pool process keeps it while its worker's own process is stopped: nothing
    else renews the claim here (no keeper runs), yet the store recovers nothing for three
    leases; once another claim took the job over, the run is held (the renewal loop asks
    the task's thread to hold it, ``_hold``)."""
    token = _claimed(coordinator)
    sure = coordinator.holdings.sure_until(delivery_tag("a", token))
    assert sure is not None
    request = _task_request("a", token, sure)  # as the gate hands it over
    running = thaw_guard._claimed_run(SimpleNamespace(app=coordinator.app, name="t",
                                                      request=request))
    assert running is not None and running.claim == ("a", token)
    stopped: list[Any] = []
    monkeypatch.setattr(thaw_guard, "_hold", stopped.append)
    monkeypatch.setattr(thaw_guard, "_running", running)
    keeping = threading.Thread(target=thaw_guard._keep, args=(running,), daemon=True)
    keeping.start()
    try:
        until = clock() + 3 * LEASE_S
        while clock() < until:  # each look a recovery pass, as another worker's keeper
            assert coordinator.backend.recover() == []
            time.sleep(0.05)
        record = coordinator.backend.record("a")
        assert record is not None and record.state == "running", record
        assert not stopped
        # Taken over: given back under its token, claimed anew by another worker.
        coordinator.backend.settle([Settle("a", token, "requeue", None)])
        assert coordinator.backend.claim_job("a", "other").outcome == "claimed"
        wait_until(lambda: stopped, timeout=5, interval=0.02, message="the run stopped")
        assert stopped == [running]
        keeping.join(timeout=5)
        assert not keeping.is_alive()
    finally:
        monkeypatch.setattr(thaw_guard, "_running", None)  # a keep still going returns
        keeping.join(timeout=5)


def _unreachable(*args: Any, **kwargs: Any) -> Any:
    raise ConnectionError("store unreachable")


def _keeper_rides_out(coordinator: Coordinator, refuse: Any, allow: Any,
                      caplog: pytest.LogCaptureFixture) -> None:
    """Claim, start the keeper, refuse writes for a while, allow them again: the keeper
    stays alive, retries, warns, and the claim is confirmed again."""
    token = _claimed(coordinator)
    tag = delivery_tag("a", token)
    calls: list[float] = []
    failed: list[float] = []
    real = coordinator.backend.heartbeat

    def counted(held: Any, *marks: Any) -> Any:  # marks: start marks, when a run started
        calls.append(clock())
        try:
            return real(held, *marks)
        except Exception:
            failed.append(clock())
            raise

    coordinator.backend.heartbeat = counted  # type: ignore[method-assign]
    keeper = CoordinationKeeper(coordinator)
    with caplog.at_level(logging.WARNING, "celery_plus.keeper"):
        keeper.start()
        try:
            wait_until(lambda: len(calls) >= 2, timeout=5, message="heartbeats")
            refuse()
            wait_until(lambda: failed, timeout=10, message="a refused heartbeat")
            confirmed = coordinator.holdings.sure_until(tag) or 0
            wait_until(lambda: len(failed) >= 4, timeout=10, message="heartbeats retried")
            assert keeper.is_alive()
            assert coordinator.holdings.sure_until(tag) == confirmed  # nothing confirmed
            allow()
            wait_until(lambda: (coordinator.holdings.sure_until(tag) or 0) > confirmed,
                       timeout=10, message="the claim confirmed again")
            assert keeper.is_alive()
            assert not coordinator.holdings.is_lost(tag)
        finally:
            keeper.stop()
            keeper.join(timeout=10)
    warned = [r.getMessage() for r in caplog.records
              if "coordination keeper: heartbeat" in r.getMessage()]
    assert warned, caplog.text


@pytest.mark.parametrize("refusal", ["OOM", "READONLY"])
def test_the_coordination_keeper_rides_out_a_redis_refusing_writes(
        tmp_path: Path, refusal: str, caplog: pytest.LogCaptureFixture) -> None:
    with redis_server(tmp_path / "store") as server, \
            redis_server(tmp_path / "primary") as primary:
        coordinator = _coordinator(server.url, "c", lease_s=6.0, heartbeat_s=0.2)
        admin = server.client()
        try:
            if refusal == "OOM":
                _keeper_rides_out(coordinator, lambda: admin.config_set("maxmemory", 1),
                                  lambda: admin.config_set("maxmemory", 0), caplog)
            else:
                _keeper_rides_out(coordinator,
                                  lambda: admin.replicaof("127.0.0.1", primary.port),
                                  lambda: admin.replicaof("NO", "ONE"), caplog)
        finally:
            coordinator.close()
    assert any(refusal in line for line in caplog.text.splitlines()
               if "coordination keeper" in line), caplog.text


@pytest.fixture
def pg_database() -> Iterator[str]:
    """A database of this test's own on the shared PostgreSQL, dropped afterwards."""
    import psycopg

    name = f"plus_coord_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield PG_URL.rsplit("/", 1)[0] + "/" + name
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


def test_the_coordination_keeper_rides_out_a_read_only_postgresql(
        pg_database: str, caplog: pytest.LogCaptureFixture) -> None:
    coordinator = _coordinator(pg_database, "c", lease_s=6.0, heartbeat_s=0.2)
    try:
        _keeper_rides_out(coordinator, lambda: set_pg_read_only(pg_database, True),
                          lambda: set_pg_read_only(pg_database, False), caplog)
    finally:
        coordinator.close()
    assert "25006" in caplog.text or "read-only" in caplog.text, caplog.text
