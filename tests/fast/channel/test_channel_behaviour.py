"""What a kombu client sees of the ``plus`` transport, on every store (``conftest.py``).

Driven through kombu's API alone — ``Connection``, ``Producer``, ``Consumer`` with
``drain_events``, ``SimpleQueue``, ``basic_get`` — with no Celery worker, so each behaviour
is checked in milliseconds on the in-process store and, with ``PLUS_CHANNEL_STORES``, on
SQLite, Redis and PostgreSQL unchanged.

Messages on durable queues carry Celery's ``task`` and ``id`` headers (:func:`publish`), as
every task message does: a message without a ``task`` header is malformed for a durable
queue, and its ack dead-letters it
(:func:`test_an_acked_message_without_a_task_header_is_dead_lettered`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import threading
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from typing import Any

import kombu
import pytest
from kombu import Consumer, Exchange, Producer, Queue

from celery_plus.model import rules
from celery_plus.model.store import NewJob
from celery_plus.transport.channel import ChannelClosed
from tests.support import wait_until

from .conftest import Store

TASK = "channel.task"
MALFORMED = "malformed message"


def publish(channel: Any, queue: str, body: Any = None, *, job_id: str | None = None,
            priority: int | None = None, eta: datetime | None = None,
            plus: dict[str, Any] | None = None, **kwargs: Any) -> str:
    """Publish a task-like message to ``queue``; its job id."""
    job_id = job_id or str(uuid.uuid4())
    headers: dict[str, Any] = {"task": TASK, "id": job_id}
    if eta is not None:
        headers["eta"] = eta.isoformat()
    if plus is not None:
        headers["plus"] = plus
    Producer(channel).publish({"n": job_id} if body is None else body, routing_key=queue,
                              headers=headers, priority=priority, declare=[Queue(queue)],
                              **kwargs)
    return job_id


def consume(conn: kombu.Connection, queue: Queue | str, count: int, *, timeout: float = 10,
            prefetch: int | None = None, **options: Any) -> tuple[list[Any], Consumer]:
    """Start a consumer of ``queue`` and drain until ``count`` messages came (the consumer is
    left open: close it, or let the connection close it)."""
    got: list[Any] = []
    consumer = Consumer(conn, [Queue(queue) if isinstance(queue, str) else queue],
                        callbacks=[lambda body, message: got.append(message)],
                        prefetch_count=prefetch, **options)
    consumer.consume()
    drain(conn, lambda: len(got) >= count, timeout)
    return got, consumer


def drain(conn: kombu.Connection, done: Callable[[], bool], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError("timed out draining")
        with contextlib.suppress(TimeoutError):
            conn.drain_events(timeout=min(left, 0.5))


def nothing_more(conn: kombu.Connection, seconds: float = 0.5) -> None:
    """Nothing is delivered for ``seconds``."""
    with pytest.raises(TimeoutError):
        conn.drain_events(timeout=seconds)


def job_ids(messages: list[Any]) -> list[str]:
    return [m.headers["id"] for m in messages]


# -- publish, consume, settle ------------------------------------------------------------
def test_a_published_message_is_consumed_with_its_body_headers_and_routing(
        store: Store) -> None:
    with store.connection() as conn:
        job_id = publish(conn.default_channel, "work", {"hello": "world"})
        [message], _ = consume(conn, "work", 1)
        assert message.payload == {"hello": "world"}
        assert message.headers["id"] == job_id and message.headers["task"] == TASK
        assert message.delivery_info["routing_key"] == "work"
        assert not message.delivery_info.get("redelivered")
        assert store.state(job_id) == "running"
        message.ack()


def test_an_ack_removes_the_message(store: Store) -> None:
    with store.connection() as conn:
        job_id = publish(conn.default_channel, "work")
        [message], _ = consume(conn, "work", 1)
        message.ack()
        wait_until(lambda: store.state(job_id) == "completed", timeout=10,
                   message="job completed")
        nothing_more(conn)
    assert store.view.size("work") == 0


def test_a_requeued_message_is_delivered_again_flagged_redelivered(store: Store) -> None:
    with store.connection() as conn:
        job_id = publish(conn.default_channel, "work")
        got, _ = consume(conn, "work", 1)
        got[0].requeue()
        drain(conn, lambda: len(got) == 2)
        again = got[1]
        assert again.headers["id"] == job_id
        assert again.delivery_info["redelivered"] is True
        assert again.headers["redelivered"] is True
        again.ack()
        wait_until(lambda: store.state(job_id) == "completed", timeout=10,
                   message="job completed")
    assert (store.inspect.job(job_id) or {})["dl"] == "2"


def test_a_reject_without_requeue_dead_letters_the_message(store: Store) -> None:
    with store.connection() as conn:
        job_id = publish(conn.default_channel, "work")
        [message], _ = consume(conn, "work", 1)
        message.reject()
        wait_until(lambda: store.state(job_id) == "failed", timeout=10,
                   message="job dead-lettered")
        nothing_more(conn)
    assert (store.inspect.job(job_id) or {})["reason"] == "rejected"
    assert store.inspect.ids_in_state("failed") == [job_id]


def test_an_acked_message_without_a_task_header_is_dead_lettered(store: Store) -> None:
    with store.connection() as conn:
        Producer(conn.default_channel).publish({"plain": "kombu"}, routing_key="work",
                                               declare=[Queue("work")])
        [message], _ = consume(conn, "work", 1)
        assert message.payload == {"plain": "kombu"}
        message.ack()
        wait_until(lambda: store.inspect.ids_in_state("failed"), timeout=10,
                   message="dead-lettered")
    [job_id] = store.inspect.ids_in_state("failed")
    record = store.inspect.job(job_id) or {}
    assert record["reason"] == MALFORMED and "no 'task' header" in record["emsg"], record


def test_a_channel_closed_with_unacked_messages_gives_them_back(store: Store) -> None:
    with store.connection() as conn:
        job_id = publish(conn.default_channel, "work")
        consume(conn, "work", 1)
    with store.connection() as conn:
        [message], _ = consume(conn, "work", 1)
        assert message.headers["id"] == job_id
        assert not message.delivery_info.get("redelivered")  # released, not counted
        message.ack()


# -- flow ----------------------------------------------------------------------------------
def test_qos_prefetch_bounds_the_messages_claimed(store: Store) -> None:
    with store.connection() as conn:
        ids = [publish(conn.default_channel, "work") for _ in range(5)]
        got, _ = consume(conn, "work", 2, prefetch=2)
        nothing_more(conn)
        assert len(got) == 2
        assert len(store.inspect.ids_in_state("running")) == 2
        assert store.view.size("work") == 3
        got[0].ack()
        drain(conn, lambda: len(got) == 3)
        for message in got[1:]:
            message.ack()
        drain(conn, lambda: len(got) == 5)
        for message in got[3:]:
            message.ack()
        assert sorted(job_ids(got)) == sorted(ids)


def delivered_one_by_one(conn: kombu.Connection, queue: str, count: int) -> list[str]:
    """The job ids of ``count`` messages of ``queue``, consumed with a prefetch of one and
    acked one at a time, in the order they came."""
    got, consumer = consume(conn, queue, 1, prefetch=1)
    for taken in range(1, count):
        got[taken - 1].ack()
        drain(conn, lambda n=taken: len(got) > n)
    got[-1].ack()
    consumer.cancel()
    return job_ids(got)


def test_priorities_order_delivery_lowest_number_first_fifo_within_one(store: Store) -> None:
    """Two queues, three priorities in a shuffled mix: each queue hands its messages out by
    priority (0 first), in publish order within one, each exactly once."""
    rng = random.Random(20240501)
    queues, priorities = ("q1", "q2"), (0, 5, 9)
    with store.connection() as conn:
        published = [(q, p, n, publish(conn.default_channel, q, priority=p))
                     for n, (q, p) in enumerate((rng.choice(queues), rng.choice(priorities))
                                                for _ in range(60))]
        assert {(q, p) for q, p, _, _ in published} == {(q, p) for q in queues
                                                         for p in priorities}
        for queue in queues:
            expected = [job_id for q, p, n, job_id in sorted(published, key=lambda j: (j[1], j[2]))
                        if q == queue]
            assert delivered_one_by_one(conn, queue, len(expected)) == expected, queue


def test_an_eta_message_waits_until_it_is_due(store: Store) -> None:
    with store.connection() as conn:
        eta = datetime.now(timezone.utc) + timedelta(seconds=1.5)
        job_id = publish(conn.default_channel, "work", eta=eta)
        assert store.state(job_id) == "scheduled"
        assert conn.default_channel.basic_get("work") is None
        [message], _ = consume(conn, "work", 1)
        assert datetime.now(timezone.utc) >= eta - timedelta(milliseconds=50)
        assert message.headers["id"] == job_id
        message.ack()


def test_an_idle_consumer_wakes_when_a_message_is_published(store: Store) -> None:
    with store.connection() as conn:
        got, _ = consume(conn, "work", 0)

        def later() -> None:
            time.sleep(0.3)
            with store.connection() as other:
                publish(other.default_channel, "work")

        publisher = threading.Thread(target=later)
        started = time.monotonic()
        publisher.start()
        drain(conn, lambda: len(got) == 1, timeout=10)
        publisher.join()
        assert time.monotonic() - started < 2.0
        got[0].ack()


# -- durable extensions --------------------------------------------------------------------
def test_a_second_message_with_a_pending_unique_key_coalesces(store: Store) -> None:
    unique = {"u": ["channel.task:k", "pending", 0]}
    with store.connection() as conn:
        first = publish(conn.default_channel, "work", plus=unique)
        second = publish(conn.default_channel, "work", plus=unique)
        assert store.view.size("work") == 1
        assert store.inspect.job(second) is None and store.inspect.holder("channel.task:k") == first
        [message], _ = consume(conn, "work", 1)
        nothing_more(conn)
        assert message.headers["id"] == first
        message.ack()


def test_a_concurrency_slot_holds_the_second_message_until_the_first_is_acked(
        store: Store) -> None:
    group = {"c": ["channel.task:acme", 1]}
    with store.connection() as conn:
        first = publish(conn.default_channel, "work", plus=group)
        second = publish(conn.default_channel, "work", plus=group)
        got, _ = consume(conn, "work", 1, prefetch=10)
        nothing_more(conn)
        assert job_ids(got) == [first]
        assert store.state(second) == "blocked"
        got[0].ack()
        drain(conn, lambda: len(got) == 2)
        assert got[1].headers["id"] == second
        got[1].ack()


def test_a_message_requeued_past_its_delivery_limit_is_dead_lettered(store: Store) -> None:
    with store.connection() as conn:
        job_id = publish(conn.default_channel, "work", plus={"md": 2})
        got, _ = consume(conn, "work", 1)
        got[0].requeue()
        drain(conn, lambda: len(got) == 2)
        got[1].requeue()
        wait_until(lambda: store.state(job_id) == "failed", timeout=10,
                   message="dead-lettered at its delivery limit")
        nothing_more(conn)
    assert (store.inspect.job(job_id) or {})["reason"] == "delivery limit"


# -- exchanges and transient queues --------------------------------------------------------
def test_fanout_reaches_the_bound_queues_only(store: Store) -> None:
    exchange = Exchange("broadcast", type="fanout")
    bound = [Queue(f"bound{i}", exchange, durable=False, auto_delete=True) for i in (1, 2)]
    unbound = Queue("unbound", durable=False, auto_delete=True)
    with store.connection() as conn:
        channel = conn.default_channel
        for queue in [*bound, unbound]:
            queue(channel).declare()
        Producer(channel).publish({"to": "all"}, exchange=exchange, routing_key="")
        for queue in bound:
            message = queue(channel).get()
            assert message is not None and message.payload == {"to": "all"}
        assert unbound(channel).get() is None
    assert store.inspect.ids_in_state("enqueued") == []  # broadcasts are never jobs


def test_a_transient_queue_keeps_its_messages_out_of_the_job_store(store: Store) -> None:
    replies = Queue(f"{uuid.uuid4()}", durable=False, auto_delete=True)
    with store.connection() as conn:
        channel = conn.default_channel
        replies(channel).declare()
        Producer(channel).publish({"reply": 1}, routing_key=replies.name)
        assert replies(channel).queue_declare(passive=True).message_count == 1
        assert store.inspect.ids_in_state("enqueued") == []
        [message], _ = consume(conn, replies, 1)
        assert message.payload == {"reply": 1}
        message.ack()


@pytest.mark.parametrize("garbage", [b"not json", b"[" * 100_000, b"\x00z9 later"],
                         ids=["not-json", "nested-too-deep", "nul-led"])
def test_a_transient_message_that_is_no_kombu_message_is_dropped_and_the_consumer_goes_on(
        store: Store, garbage: bytes) -> None:
    """A transient message has no job to dead-letter: one that cannot be read is dropped
    (with a warning), never raised out of the transport; the next one is delivered."""
    queue = f"{uuid.uuid4()}.reply.celery.pidbox"
    with store.connection() as conn:
        store.view.push_transient(queue, garbage)
        Producer(conn.default_channel).publish({"ok": "pong"}, routing_key=queue)
        [message], _ = consume(conn, Queue(queue, durable=False, auto_delete=True), 1)
        assert message.payload == {"ok": "pong"}
        assert store.view.transient_size(queue) == 0
    with store.connection() as conn:  # basic_get too
        store.view.push_transient(queue, garbage)
        simple = conn.SimpleQueue(Queue(queue, durable=False, auto_delete=True))
        with pytest.raises(simple.Empty):
            simple.get(timeout=0.5)
        simple.close()


def test_a_remote_control_reply_queue_is_transient_by_its_name(store: Store) -> None:
    """Celery's pidbox reply queues (``*.pidbox``) are transient without a declaration."""
    queue = f"{uuid.uuid4()}.reply.celery.pidbox"
    with store.connection() as conn:
        Producer(conn.default_channel).publish({"ok": "pong"}, routing_key=queue)
        assert store.view.transient_size(queue) == 1
        assert store.inspect.ids_in_state("enqueued") == []
    with store.connection() as conn:  # another connection, as the caller of a command
        simple = conn.SimpleQueue(Queue(queue, durable=False, auto_delete=True))
        assert simple.get(timeout=5).payload == {"ok": "pong"}
        simple.close()


# -- inspection and housekeeping -----------------------------------------------------------
def test_basic_get_returns_one_message_or_none(store: Store) -> None:
    with store.connection() as conn:
        channel = conn.default_channel
        assert channel.basic_get("work") is None
        job_id = publish(channel, "work")
        message = channel.basic_get("work")
        assert message is not None and message.headers["id"] == job_id
        assert channel.basic_get("work") is None
        message.ack()
        wait_until(lambda: store.state(job_id) == "completed", timeout=10,
                   message="job completed")


def test_size_counts_the_waiting_messages(store: Store) -> None:
    with store.connection() as conn:
        simple = conn.SimpleQueue("work")
        assert simple.qsize() == 0
        for _ in range(3):
            publish(conn.default_channel, "work")
        assert simple.qsize() == 3
        assert Queue("work")(conn.default_channel).queue_declare(passive=True).message_count == 3
        taken = conn.default_channel.basic_get("work")  # claimed: no longer waiting
        assert simple.qsize() == 2
        taken.ack()
        simple.close()


def test_purge_empties_a_queue_and_counts_what_it_removed(store: Store) -> None:
    with store.connection() as conn:
        channel = conn.default_channel
        ids = [publish(channel, "work") for _ in range(3)]
        transient = Queue("notes", durable=False, auto_delete=True)
        transient(channel).declare()
        Producer(channel).publish({"x": 1}, routing_key="notes")
        assert Queue("work")(channel).purge() == 3
        assert transient(channel).purge() == 1
        assert store.view.size("work") == 0 and store.view.transient_size("notes") == 0
        assert all(store.inspect.job(i) is None for i in ids)
        assert channel.basic_get("work") is None


def test_a_closed_channel_raises_a_recoverable_connection_error(store: Store) -> None:
    with store.connection() as conn:
        producer = conn.Producer()
        producer.channel.close()
        with pytest.raises(ChannelClosed):
            producer.publish({"n": 1}, routing_key="work", headers={"task": TASK})
        assert isinstance(ChannelClosed(), conn.recoverable_connection_errors)


# -- bad and odd input ---------------------------------------------------------------------
def test_a_malformed_message_is_dead_lettered_and_the_consumer_goes_on(store: Store) -> None:
    store.view.publish(NewJob(id="garbage", queue="work", message="not a kombu message"))
    with store.connection() as conn:
        job_id = publish(conn.default_channel, "work")
        [message], _ = consume(conn, "work", 1)
        assert message.headers["id"] == job_id
        message.ack()
        wait_until(lambda: store.state("garbage") == "failed", timeout=10,
                   message="the malformed job dead-lettered")
    assert (store.inspect.job("garbage") or {})["reason"] == MALFORMED
    assert store.view.raw_message("garbage") == b"not a kombu message"


@pytest.mark.parametrize("message, reason", [
    (b"", "message missing"),
    (b"\xff\xfe not UTF-8", MALFORMED),
    (b"[" * 100_000, MALFORMED),  # past the recursion limit: RecursionError, not ValueError
    (b'["a list"]', MALFORMED),
    (b'{"properties": "not an object"}', MALFORMED),
], ids=["empty", "not-utf8", "nested-too-deep", "not-an-object", "no-properties"])
def test_an_unreadable_message_is_dead_lettered_with_its_reason_and_the_consumer_goes_on(
        store: Store, message: bytes, reason: str) -> None:
    store.view.push_raw("work", "unreadable", message)
    with store.connection() as conn:
        job_id = publish(conn.default_channel, "work")
        [got], _ = consume(conn, "work", 1)
        assert got.headers["id"] == job_id
        got.ack()
        wait_until(lambda: store.state("unreadable") == "failed", timeout=10,
                   message="the unreadable job dead-lettered")
    record = store.inspect.job("unreadable") or {}
    assert record["reason"] == reason, record
    assert int(record["dl"]) == 1, record  # its claim counted as a delivery


def test_a_message_in_a_later_release_s_format_goes_back_after_a_back_off(
        store: Store, caplog: pytest.LogCaptureFixture) -> None:
    """A stored format this release does not read (a NUL-led mark, as a later release's
    layout would start) is given back with its reason for a worker that reads it, each time
    a delivery, but not at the head of its queue at once: it waits a back-off
    (``rules.defer_ms(1)``: 1 s; its growth per delivery is the conformance suite's,
    ``test_settling.py``), while the jobs behind it run. At the worker's
    ``plus_max_deliveries`` (2 here) it is a dead letter."""
    store.view.push_raw("work", "later", b"\x00z9 a later release's layout")
    with caplog.at_level(logging.WARNING), store.connection(plus_max_deliveries=2) as conn:
        behind = [publish(conn.default_channel, "work") for _ in range(4)]
        got, _ = consume(conn, "work", len(behind))
        assert job_ids(got) == behind
        for message in got:
            message.ack()
        # Every job behind it ran while it waits its back-off, one delivery spent.
        drain(conn, lambda: store.state("later") != "running")  # the settle stored
        record = store.inspect.job("later") or {}
        assert (record.get("st"), int(record.get("dl") or 0)) == ("scheduled", 1), record
        drain(conn, lambda: store.state("later") == "failed", timeout=20)
        nothing_more(conn, 0.3)
    record = store.inspect.job("later") or {}
    assert record["reason"] == "unreadable by this release", record
    assert int(record["dl"]) == 2, record
    history = json.loads(record["hist"])[-2:]
    assert [e.get("outcome") for e in history] == ["unreadable by this release"] * 2, history
    gap = int(history[1]["finished_ms"]) - int(history[0]["finished_ms"])
    assert rules.defer_ms(1) <= gap < 10_000, history
    given_back = [r.getMessage() for r in caplog.records if "given back" in r.getMessage()]
    assert len(given_back) == 1 and "job later given back for 1 s (delivery 1)" in \
        given_back[0], given_back


def test_an_unreadable_job_at_its_own_delivery_limit_is_a_dead_letter_not_given_back(
        store: Store, caplog: pytest.LogCaptureFixture) -> None:
    """The job's own ``max_deliveries`` (1) comes before the worker's (3): the store makes
    the ``defer`` a dead letter, and the worker's log says so, not that it was given back."""
    store.view.publish(NewJob(id="later", queue="work", max_deliveries=1,
                              message=b"\x00z9 a later release's layout"))  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING), store.connection(plus_max_deliveries=3) as conn:
        job_id = publish(conn.default_channel, "work")
        [got], _ = consume(conn, "work", 1)
        assert got.headers["id"] == job_id
        got.ack()
        # The settle's outcome is logged by whichever thread stored it (a claim, the keeper).
        drain(conn, lambda: any("job later dead-lettered (delivery limit)" in r.getMessage()
                                for r in caplog.records))
    record = store.inspect.job("later") or {}
    assert (record["reason"], int(record["dl"])) == ("delivery limit", 1), record
    logged = [r.getMessage() for r in caplog.records]
    assert not any("given back" in m for m in logged), logged


def test_a_body_that_cannot_be_decoded_is_dead_lettered(store: Store) -> None:
    with store.connection() as conn:
        job_id = publish(conn.default_channel, "work", b"\x00\x01", serializer=None,
                         content_type="application/x-nope", content_encoding="binary")
        errors: list[Exception] = []

        def on_decode_error(message: Any, exc: Exception) -> None:
            errors.append(exc)
            message.ack()  # as Celery's consumer does with a message it cannot decode

        consumer = Consumer(conn, [Queue("work")], accept=["json"],
                            on_decode_error=on_decode_error,
                            callbacks=[lambda body, message: message.ack()])
        consumer.consume()
        drain(conn, lambda: bool(errors))
        wait_until(lambda: store.state(job_id) == "failed", timeout=10,
                   message="dead-lettered")
    assert (store.inspect.job(job_id) or {})["reason"] == MALFORMED


@pytest.mark.parametrize("body", ["nul \x00 inside", "lone \ud800 surrogate \udfff",
                                  "x" * (1 << 20)], ids=["nul", "lone-surrogates", "1mb"])
def test_odd_bodies_round_trip_unchanged(store: Store, body: str) -> None:
    with store.connection() as conn:
        job_id = publish(conn.default_channel, "work", {"text": body, "key\x00": body[:8]})
        [message], _ = consume(conn, "work", 1)
        assert message.payload == {"text": body, "key\x00": body[:8]}
        message.ack()
        wait_until(lambda: store.state(job_id) == "completed", timeout=10,
                   message="job completed")
