"""kombu consumers of durable queues, on every store (issue 11, defects 9 and 10).

* A no-ack consumer (``basic_get(no_ack=True)``, ``SimpleQueue(no_ack=True)``) takes a job
  for good: the job is completed as it is delivered, not left running until its lease
  expires and redelivered until it becomes a "delivery limit" dead letter.
* A consumer that only calls ``basic_get`` has its claims renewed like any consumer's.
* Failure details noted for a delivery already settled (an early ack) are not kept.
* ``basic_get`` turns a claim into a message as a consumer's delivery does: a job that is
  no kombu message is dead-lettered, not raised to the caller and left claimed.
"""

from __future__ import annotations

import time

from celery_plus.transport.channel import QoS
from tests.inspectors import inspector_for
from tests.support import wait_until

from .conftest import Store


def completed(store: Store, job_id: str) -> bool:
    return (inspector_for(store.view).job(job_id) or {}).get("st") == "completed"


def test_a_no_ack_basic_get_completes_the_job(store: Store) -> None:
    [job_id] = store.publish()
    with store.connection() as conn:
        message = conn.default_channel.basic_get("work", no_ack=True)
        assert message is not None and message.headers["id"] == job_id
        wait_until(lambda: completed(store, job_id), timeout=10, message="job completed")
        assert conn.default_channel.basic_get("work", no_ack=True) is None
    record = inspector_for(store.view).job(job_id) or {}
    assert record["dl"] == "1", record


def test_a_no_ack_simple_queue_completes_its_jobs(store: Store) -> None:
    ids = store.publish(3)
    with store.connection() as conn:
        queue = conn.SimpleQueue("work", no_ack=True)
        got = [queue.get(timeout=10).headers["id"] for _ in ids]
        assert sorted(got) == sorted(ids)
        wait_until(lambda: all(completed(store, i) for i in ids), timeout=10,
                   message="every job completed")
        queue.close()


def test_a_basic_get_consumer_has_its_claims_renewed(store: Store) -> None:
    [job_id] = store.publish()
    lease_s = 1.0
    with store.connection(plus_visibility_timeout=lease_s) as conn:
        message = conn.default_channel.basic_get("work")
        assert message is not None
        first = inspector_for(store.view).lease_deadline(job_id)
        time.sleep(3 * lease_s)  # held, not acked, well past the lease
        record = inspector_for(store.view).job(job_id) or {}
        assert record.get("st") == "running" and record.get("tok") == "1", record
        renewed = inspector_for(store.view).lease_deadline(job_id)
        assert (renewed or 0) > (first or 0), "never renewed"
        message.ack()
        wait_until(lambda: completed(store, job_id), timeout=10, message="job completed")
    assert store.view.stats().get("recovered", 0) == 0


def test_failure_details_of_an_early_acked_delivery_are_not_kept(store: Store) -> None:
    store.publish(5)
    with store.connection() as conn:
        channel = conn.default_channel
        qos = channel.qos
        assert isinstance(qos, QoS)
        for _ in range(5):
            message = channel.basic_get("work")
            message.ack()  # acks_late=False: acked when the task starts...
            qos.mark_failure(message.delivery_tag, {"reason": "task failed"})  # ...fails
        assert qos._failures == {}


def test_a_basic_get_of_a_malformed_job_dead_letters_it(store: Store) -> None:
    store.view.push_raw("work", "bad", b"not a kombu message")
    [job_id] = store.publish()
    with store.connection() as conn:
        got = [conn.default_channel.basic_get("work") for _ in range(2)]
        messages = [m for m in got if m is not None]  # the malformed job gives None
        assert [m.headers["id"] for m in messages] == [job_id]
        assert messages[0].delivery_info["routing_key"] == "work"
        messages[0].ack()
        wait_until(lambda: completed(store, job_id), timeout=10, message="job completed")
        inspect = inspector_for(store.view)
        wait_until(lambda: (inspect.job("bad") or {}).get("st") == "failed", timeout=10,
                   message="malformed job dead-lettered")
