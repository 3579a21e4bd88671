"""Coordinated mode's configuration rules (no broker or store is contacted).

``plus_coordination_url`` must be a Redis or PostgreSQL URL; with a ``plus+`` broker it is an
error (it would do nothing); a worker whose tasks declare extension options on a non-plus
broker without it refuses to start, while a client only warns, once per task.
"""

from __future__ import annotations

import logging
from typing import Any

import celery._state
import pytest
from celery.exceptions import ImproperlyConfigured

from celery_plus import Celery, settings
from celery_plus.coordination import (
    COORDINATED,
    DURABLE,
    PLAIN,
    check_worker,
    coordinator_for,
    mode,
)
from celery_plus.coordination import coordinator as coordinator_module
from celery_plus.coordination.keeper import CoordinationKeeper
from celery_plus.coordination.sender import coordinated_sender
from celery_plus.leases import keeper as leases_keeper
from celery_plus.leases.holdings import SURE_SHARE
from celery_plus.leases.tokens import delivery_tag
from celery_plus.model.store import NewJob, Verdict
from celery_plus.stores.memory import MemoryBackend

AMQP = "amqp://guest:guest@127.0.0.1:5672//"


@pytest.fixture(autouse=True)
def _own_tasks_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Apps here get only their own tasks (not the shared tasks other test modules made)."""
    monkeypatch.setattr(celery._state, "_on_app_finalizers", set())


def _app(broker: str, *, unique: bool = True, **conf: Any) -> Celery:
    app = Celery("coordination_unit", broker=broker, set_as_current=False)
    app.conf.update(**conf)
    if unique:

        @app.task(name="unit.send_invoice", unique=True, shared=False)
        def send_invoice(customer_id: int) -> None: ...

    @app.task(name="unit.plain", shared=False)
    def plain() -> None: ...

    return app


@pytest.mark.parametrize("url", ["redis://localhost:6379/0", "rediss://h/1",
                                 "postgresql://u@h/db", "postgres://h/db", None])
def test_coordination_url_accepts_redis_and_postgresql(url: str | None) -> None:
    assert settings.resolve({"plus_coordination_url": url}).coordination_url == url


@pytest.mark.parametrize("url", ["plus+redis://h", "amqp://h", "sqlite:///x.db", "localhost", 5])
def test_coordination_url_rejects_other_values_naming_the_setting(url: object) -> None:
    with pytest.raises(ImproperlyConfigured, match="plus_coordination_url") as err:
        settings.resolve({"plus_coordination_url": url})
    assert "redis://" in str(err.value) and "postgresql://" in str(err.value)


def test_the_mode_follows_the_broker_and_the_setting() -> None:
    assert mode(_app("plus+redis://127.0.0.1:6379/0")) == DURABLE
    assert mode(_app(AMQP)) == PLAIN
    assert mode(_app("redis://127.0.0.1:6379/0")) == PLAIN
    coordinated = _app(AMQP, plus_coordination_url="redis://127.0.0.1:6379/0")
    assert mode(coordinated) == COORDINATED
    coordinator = coordinator_for(coordinated)
    assert coordinator is not None and coordinator_for(coordinated) is coordinator
    assert coordinator_for(_app("plus+redis://127.0.0.1:6379/0")) is None


def test_a_plus_broker_with_a_coordination_url_is_an_error() -> None:
    app = _app("plus+redis://127.0.0.1:6379/0", plus_coordination_url="redis://h:6379/0")
    with pytest.raises(ImproperlyConfigured, match="remove plus_coordination_url"):
        mode(app)
    with pytest.raises(ImproperlyConfigured, match="plus_coordination_url"):
        check_worker(app)


def test_a_worker_refuses_unenforced_extension_options_naming_tasks_and_fix() -> None:
    with pytest.raises(ImproperlyConfigured) as err:
        check_worker(_app(AMQP))
    message = str(err.value)
    assert "unit.send_invoice" in message and "unit.plain" not in message
    assert "plus_coordination_url" in message and "amqp://guest:**@" in message
    assert check_worker(_app(AMQP, unique=False)) == PLAIN, "no options: plain Celery"
    assert check_worker(_app(AMQP, plus_coordination_url="redis://h:6379/0")) == COORDINATED


def test_a_coordinated_worker_refuses_a_cluster_rate_limit_it_cannot_enforce() -> None:
    app = _app(AMQP, unique=False, plus_coordination_url="redis://h:6379/0")

    @app.task(name="unit.call_api", rate_limit="60/m", rate_limit_scope="cluster", shared=False)
    def call_api() -> None: ...

    with pytest.raises(ImproperlyConfigured, match=r"unit\.call_api.*cluster rate limit"):
        check_worker(app)


def test_a_plain_mode_client_warns_once_per_task_and_still_sends(
        caplog: pytest.LogCaptureFixture) -> None:
    sent: list[str] = []
    send = coordinated_sender(_app(AMQP), lambda producer, name, message, **o: sent.append(name))
    with caplog.at_level(logging.WARNING, logger="celery_plus.coordination"):
        for _ in range(3):
            send(None, "unit.send_invoice", None, headers={"plus": {"u": ["k", "running", 0]}})
        send(None, "unit.plain", None, headers={})
    assert sent == ["unit.send_invoice"] * 3 + ["unit.plain"]
    warnings = [r for r in caplog.records if "not enforced" in r.getMessage()]
    assert len(warnings) == 1 and "unit.send_invoice" in warnings[0].getMessage()


def test_a_durable_app_keeps_celerys_sender_unchanged() -> None:
    def celery_sender(*args: Any, **kwargs: Any) -> None: ...

    assert coordinated_sender(_app("plus+redis://127.0.0.1:6379/0"), celery_sender) is (
        celery_sender)


def test_a_coordinator_holds_its_claims_in_the_leases_ledger_and_checks_suspect_settles(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # On the in-process reference store: a claim is held (renewed) until its settle; a settle
    # is checked for an orphaned record only when its claim is suspect — not confirmed within
    # the sure share of its lease, or found over by a heartbeat.
    app = _app(AMQP, unique=False, plus_coordination_url="redis://h:6379/0",
               plus_visibility_timeout=10)
    coordinator = coordinator_for(app)
    assert coordinator is not None
    coordinator._backend = store = MemoryBackend()
    now = [100.0]
    for module in (coordinator_module, leases_keeper):  # the claims' and heartbeats' clock
        monkeypatch.setattr(module, "clock", lambda: now[0])
    checked: list[str] = []
    monkeypatch.setattr(coordinator, "finish_orphan",
                        lambda job_id, *_: checked.append(job_id) or True)
    for job_id in ("sure", "late", "over"):
        store.publish(NewJob(id=job_id, queue="q", message="{}"))
    tokens = {job_id: coordinator.claim(job_id).token for job_id in ("sure", "late", "over")}
    assert sorted(coordinator.holdings.renewable()) == sorted(tokens.items())
    now[0] = 101.0
    CoordinationKeeper(coordinator).heartbeat(store)  # all current: renewed at 101
    coordinator.holdings.confirmed([("over", tokens["over"])], [Verdict.ENDED], 101.0)

    now[0] = 101.0 + 10 * SURE_SHARE - 0.01
    coordinator.settle("sure", tokens["sure"], "ack")
    assert coordinator.holdings.get(delivery_tag("sure", tokens["sure"])) is None
    now[0] = 101.0 + 10 * SURE_SHARE
    coordinator.settle("late", tokens["late"], "ack")
    coordinator.settle("over", tokens["over"], "ack")
    coordinator.settle("never-held", 1, "ack")
    assert checked == ["late", "over", "never-held"]
    assert coordinator.holdings.renewable() == [] and len(coordinator.holdings) == 0


def test_a_coordinated_settle_carries_how_long_its_task_ran() -> None:
    # Coordinated mode (issue #28): the request's start (Claimed.started, from Celery's
    # on_accepted) reaches the store with the settle, so the record's start is the task's,
    # not the claim's, as on the durable transport.
    app = _app(AMQP, unique=False, plus_coordination_url="redis://h:6379/0")
    coordinator = coordinator_for(app)
    assert coordinator is not None
    now_ms = [1_000_000]
    coordinator._backend = store = MemoryBackend(clock=lambda: now_ms[0])
    store.publish(NewJob(id="late", queue="q", message="{}"))
    store.publish(NewJob(id="unmarked", queue="q", message="{}"))
    late, unmarked = coordinator.claim("late").token, coordinator.claim("unmarked").token
    now_ms[0] += 10_000  # ten seconds after the claims (in the pool's queue) ...
    # ... the task started two seconds ago
    coordinator.holdings.started(delivery_tag("late", late), leases_keeper.clock() - 2.0)
    coordinator.settle("late", late, "ack")
    coordinator.settle("unmarked", unmarked, "ack")
    rec, plain = store.record("late"), store.record("unmarked")
    assert rec is not None and plain is not None
    assert 1_900 <= rec.finished_ms - rec.started_ms <= 2_500, rec
    assert plain.started_ms == 1_000_000  # no start known: the claim's time, as before
