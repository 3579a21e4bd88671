"""The coordination store leaves no ghost record (issue #11 defect 8), on Redis and PostgreSQL.

In coordinated mode the broker, not the store, delivers a job again. A live worker whose claim
was recovered while its delivery ran (it stalled past its lease), or whose settle failed, used
to leave an ``enqueued`` record that no broker message would ever claim, holding its key.
Rules: such a record is finished as its delivery ended (ack -> completed, failure -> dead
letter, key released) unless another delivery claimed it meanwhile or it is a continuation's
(retry, replace: its message is on the broker); a requeued delivery's record is left for the
broker's redelivery; a settle the store refused is retried by the keeper until it lands; the
waiting records of a coordination store keep their holds only until the backstop.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from celery_plus import Celery
from celery_plus.coordination import coordinator_for
from celery_plus.coordination.coordinator import Coordinator
from celery_plus.coordination.gate import Claimed
from celery_plus.leases.keeper import clock
from celery_plus.model.store import NewJob, Verdict
from tests.fast.conformance.stores import PG_URL, REDIS_URL
from tests.fast.conformance.support import record
from tests.fast.unit.test_admin_cli import drop_store
from tests.inspectors import inspector_for
from tests.support import wait_until

AMQP = "amqp://guest:guest@127.0.0.1:5672//"
LOCK = "t:k=1"


@pytest.fixture(params=["redis", "postgres"])
def coordinator(request: pytest.FixtureRequest) -> Iterator[Coordinator]:
    name = f"c{uuid.uuid4().hex[:10]}"
    url = REDIS_URL if request.param == "redis" else PG_URL
    app = Celery("coordination_store", broker=AMQP, set_as_current=False)
    app.conf.update(plus_coordination_url=url, plus_key_prefix=name, plus_pg_schema=name,
                    plus_visibility_timeout=0.4, plus_heartbeat_interval=0.1,
                    plus_maintenance_interval=0.01)
    found = coordinator_for(app)
    assert found is not None
    try:
        yield found
    finally:
        found.close()
        drop_store(request.param, name)


def _publish(coordinator: Coordinator, job_id: str, **fields: Any) -> None:
    fields.setdefault("unique_lock", LOCK)
    fields.setdefault("unique_window", "running")
    assert coordinator.publish(NewJob(id=job_id, queue="q", message="m", **fields)).accepted


def _claimed_then_recovered(coordinator: Coordinator, job_id: str = "a") -> Claimed:
    _publish(coordinator, job_id)
    got = coordinator.claim(job_id)
    assert got.outcome == "claimed"
    wait_until(lambda: coordinator.backend.recover(), timeout=10, message="lease recovery")
    assert record(coordinator.backend, job_id).state == "enqueued"
    return Claimed(coordinator, job_id, got.token, "t")


@pytest.mark.parametrize(("end", "state"), [("ack", "completed"), ("reject", "failed")])
def test_a_delivery_that_ends_after_its_claim_was_recovered_finishes_its_record(
        coordinator: Coordinator, end: str, state: str) -> None:
    claimed = _claimed_then_recovered(coordinator)
    claimed.end(end)
    assert record(coordinator.backend, "a").state == state
    assert inspector_for(coordinator.backend).holder(LOCK) is None
    assert inspector_for(coordinator.backend).ids_in_state("enqueued") == []


def test_a_failure_after_the_claim_was_recovered_is_a_dead_letter_with_its_details(
        coordinator: Coordinator) -> None:
    claimed = _claimed_then_recovered(coordinator)
    claimed.failure = {"reason": "task failed", "exc_type": "ValueError", "exc_message": "no"}
    claimed.end("ack")
    rec = record(coordinator.backend, "a")
    assert (rec.state, rec.exc_type, rec.exc_message) == ("failed", "ValueError", "no")


def test_a_requeued_delivery_leaves_its_record_for_the_brokers_redelivery(
        coordinator: Coordinator) -> None:
    claimed = _claimed_then_recovered(coordinator)
    claimed.end("requeue")
    assert record(coordinator.backend, "a").state == "enqueued"
    assert coordinator.claim("a").outcome == "claimed"


def test_a_record_another_delivery_claimed_is_left_to_it(coordinator: Coordinator) -> None:
    claimed = _claimed_then_recovered(coordinator)
    again = coordinator.backend.claim_job("a", "other-worker")
    assert again.outcome == "claimed"
    claimed.end("ack")
    rec = record(coordinator.backend, "a")
    assert (rec.state, rec.worker, rec.lease_token) == ("running", "other-worker", again.token)


def test_a_continuations_record_is_left_for_its_message(coordinator: Coordinator) -> None:
    _publish(coordinator, "a")
    got = coordinator.claim("a")
    out = coordinator.publish(NewJob(id="a", queue="q", message="retry", unique_lock=LOCK,
                                     unique_window="running", lease_token=got.token))
    assert out.continued
    # The keeper saw the claim end.
    coordinator.holdings.confirmed([("a", got.token)], [Verdict.ENDED], clock())
    Claimed(coordinator, "a", got.token, "t").end("ack")
    rec = record(coordinator.backend, "a")
    assert (rec.state, rec.message) == ("enqueued", "retry")
    assert inspector_for(coordinator.backend).holder(LOCK) == "a"


def test_a_settle_the_store_refused_is_retried_until_it_lands(
        coordinator: Coordinator, monkeypatch: pytest.MonkeyPatch) -> None:
    _publish(coordinator, "a")
    got = coordinator.claim("a")
    backend = coordinator.backend
    real = backend.settle

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("store unreachable")

    monkeypatch.setattr(backend, "settle", refuse)
    Claimed(coordinator, "a", got.token, "t").end("ack")  # logged, not raised
    assert record(backend, "a").state == "running"
    coordinator.retry_unsettled()
    assert record(backend, "a").state == "running"
    monkeypatch.setattr(backend, "settle", real)
    # Meanwhile the lease ran out and was recovered: the retried settle still finishes it.
    wait_until(lambda: backend.recover(), timeout=10, message="lease recovery")
    coordinator.retry_unsettled()
    assert record(backend, "a").state == "completed"
    assert inspector_for(backend).holder(LOCK) is None


def test_waiting_records_of_a_coordination_store_keep_their_holds_only_until_the_backstop(
        coordinator: Coordinator) -> None:
    assert coordinator.backend.renews_waiting_holds is False  # type: ignore[attr-defined]
