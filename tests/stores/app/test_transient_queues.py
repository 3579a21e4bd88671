"""Transient queues over the ``plus`` transport, on every store, through kombu as Celery uses it.

Rules (``celery_plus/transport/transient.py``): a queue declared not durable, auto-delete or
exclusive is transient for every process, including publishers that never declared it, so an
``rpc://`` result is a transient message and never touches the task's job record; a message's
job identity is its task id only; exchange tables are read from the store (never a stale local
copy); bindings of transient queues lapse unless their consumer renews them, and go with an
auto-delete queue's consumer; a broadcast subscriber hears only what is sent after it started
consuming.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kombu
import pytest

from celery_plus.model.store import Backend, Settle
from celery_plus.transport.channel import BINDING_SEP
from celery_plus.transport.publishing import job_from_message
from tests.fast.conformance.stores import PG_URL, backends_on_one_store, sqlite_file
from tests.inspectors import inspector_for
from tests.support import wait_until

STORES = ("redis", "sqlite", "postgres")


class Store:
    """kombu connections to one isolated ``plus+`` store, and a backend to look inside it."""

    def __init__(self, url: str, options: dict[str, Any], view: Backend) -> None:
        self.url, self.options, self.view = url, options, view
        self._connections: list[kombu.Connection] = []

    def connect(self) -> kombu.Connection:
        conn = kombu.Connection(self.url, transport_options=dict(self.options))
        self._connections.append(conn)
        return conn

    def close(self) -> None:
        for conn in self._connections:
            conn.release()


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    kind = str(request.param)
    with backends_on_one_store(kind, tmp_path) as make:
        view: Any = make()
        if kind == "redis":
            url, options = f"plus+{view.url}", {"plus_key_prefix": view.prefix}
        elif kind == "sqlite":
            url, options = f"plus+sqlite:///{sqlite_file(tmp_path)}", {}
        else:
            url, options = f"plus+{PG_URL}", {"plus_pg_schema": view.schema}
        opened = Store(url, options, view)
        yield opened
        opened.close()



def task_message(task_id: str) -> dict[str, Any]:
    """Headers and properties of a Celery protocol 2 task message."""
    return {"headers": {"id": task_id, "task": "proj.add", "lang": "py"},
            "properties": {"correlation_id": task_id, "reply_to": "client-oid"}}


def publish_task(conn: kombu.Connection, task_id: str) -> None:
    message = task_message(task_id)
    with conn.Producer() as producer:
        producer.publish([[1, 2], {}, {}], routing_key="celery", exchange="",
                         headers=message["headers"], **message["properties"])


def reply_queue(oid: str) -> kombu.Queue:
    """Celery's ``rpc://`` reply queue (``RPCBackend.binding``)."""
    return kombu.Queue(oid, kombu.Exchange(""), oid, durable=False, auto_delete=True,
                       expires=86400.0)


def test_a_message_takes_its_job_id_from_the_task_id_only() -> None:
    task = job_from_message("celery", task_message("t-1"), 0)
    assert task.id == "t-1"
    # An rpc:// result names the task in its correlation id; it is no job of that task.
    reply = job_from_message("oid", {"headers": {}, "properties": {"correlation_id": "t-1"}}, 0)
    assert reply.id != "t-1" and uuid.UUID(reply.id)


def test_an_rpc_result_is_a_transient_message_and_never_touches_the_tasks_record(
        store: Store) -> None:
    client, worker = store.connect(), store.connect()
    oid = f"oid-{uuid.uuid4().hex}"
    received: list[Any] = []
    with kombu.Consumer(client, [reply_queue(oid)], callbacks=[
            lambda body, message: received.append((body, message.properties))], no_ack=True):
        publish_task(client, "task-1")
        before = store.view.raw_message("task-1")
        assert before is not None and inspector_for(store.view).job("task-1")["st"] == "enqueued"
        # The worker (another connection, which never declared the reply queue) answers as
        # Celery's RPCBackend.store_result does: no headers, correlation_id = the task id.
        with worker.Producer() as producer:
            producer.publish({"task_id": "task-1", "status": "SUCCESS", "result": 3},
                             exchange="", routing_key=oid, correlation_id="task-1",
                             delivery_mode=1)
        wait_until(lambda: client.drain_events(timeout=1) or received, timeout=15,
                   message="the rpc reply")
    assert received[0][0]["result"] == 3
    assert received[0][1]["correlation_id"] == "task-1"
    assert store.view.raw_message("task-1") == before, "the reply overwrote the task's job"
    assert inspector_for(store.view).job("task-1")["st"] == "enqueued"
    assert inspector_for(store.view).ids_in_state("enqueued") == ["task-1"]
    assert inspector_for(store.view).ids_in_state("scheduled") == []
    assert store.view.size(oid) == 0


def test_the_next_identical_unique_call_is_not_deduplicated_into_a_finished_job(
        store: Store) -> None:
    """A unique task's result through rpc:// does not become the task's job again."""
    client, worker = store.connect(), store.connect()
    oid = f"oid-{uuid.uuid4().hex}"
    message = task_message("u-1")
    message["headers"]["plus"] = {"u": ["key-1", "running", 0]}
    with kombu.Consumer(client, [reply_queue(oid)], no_ack=True):
        with client.Producer() as producer:
            producer.publish([[], {}, {}], routing_key="celery", exchange="",
                             headers=message["headers"], **message["properties"])
        claimed = store.view.claim(["celery"], "w", 1)
        assert [c.job_id for c in claimed.claims] == ["u-1"]
        with worker.Producer() as producer:  # the result, then the ack
            producer.publish({"task_id": "u-1", "status": "SUCCESS"}, exchange="",
                             routing_key=oid, correlation_id="u-1", delivery_mode=1)
        store.view.settle([Settle("u-1", claimed.claims[0].token, "ack")])
    assert inspector_for(store.view).job("u-1")["st"] == "completed"
    assert inspector_for(store.view).holder("key-1") is None, "the reply took the unique key again"
    again = task_message("u-2")
    again["headers"]["plus"] = {"u": ["key-1", "running", 0]}
    with client.Producer() as producer:
        producer.publish([[], {}, {}], routing_key="celery", exchange="",
                         headers=again["headers"], **again["properties"])
    assert inspector_for(store.view).job("u-2")["st"] == "enqueued"
    assert inspector_for(store.view).holder("key-1") == "u-2"


def test_exchange_tables_are_read_from_the_store_not_a_stale_local_copy(store: Store) -> None:
    """A connection that once bound (and deleted) a reply queue still routes to the reply
    queues other connections bind later (Celery's pidbox replies in one process)."""
    used, other = store.connect(), store.connect()
    exchange = kombu.Exchange("reply.test.pidbox", type="direct", durable=False)
    first = kombu.Queue("first.reply.test.pidbox", exchange, "first", auto_delete=True)
    first(used.default_channel).declare()
    first(used.default_channel).delete()
    second = kombu.Queue("second.reply.test.pidbox", exchange, "second", auto_delete=True)
    got: list[Any] = []
    with kombu.Consumer(other, [second], callbacks=[lambda b, m: got.append(b)], no_ack=True):
        with used.Producer() as producer:
            producer.publish({"hello": 1}, exchange=exchange, routing_key="second")
        wait_until(lambda: other.drain_events(timeout=1) or got, timeout=15,
                   message="the reply on the queue bound by the other connection")
    assert got == [{"hello": 1}]


@pytest.fixture
def short_lifetimes(monkeypatch: pytest.MonkeyPatch) -> int:
    """Transient bindings live 0.6 s without a refresh (10 s in production)."""
    monkeypatch.setattr("celery_plus.transport.transient.MIN_TTL_MS", 600)
    monkeypatch.setattr("celery_plus.transport.transient.DEFAULT_TTL_MS", 600)
    return 600


def broadcast_queue(name: str, exchange: kombu.Exchange) -> kombu.Queue:
    """A remote-control node queue as kombu's Mailbox declares it."""
    return kombu.Queue(f"{name}.test.pidbox", exchange, auto_delete=True, durable=False,
                       expires=0.1, message_ttl=300.0)


def bound_queues(view: Backend, exchange: str) -> set[str]:
    return {b.split(BINDING_SEP)[-1] for b in view.bindings(exchange)}


def test_a_transient_binding_lapses_unless_its_consumer_renews_it(
        store: Store, short_lifetimes: int) -> None:
    exchange = kombu.Exchange("test.pidbox", type="fanout", durable=False)
    alive, dead = store.connect(), store.connect()
    broadcast_queue("dead", exchange)(dead.default_channel).declare()  # never consumed
    with kombu.Consumer(alive, [broadcast_queue("alive", exchange)], no_ack=True):
        assert bound_queues(store.view, "test.pidbox") == {
            "alive.test.pidbox", "dead.test.pidbox"}
        deadline = time.monotonic() + 3 * short_lifetimes / 1000
        while time.monotonic() < deadline:  # the consumer's drain loop renews its binding
            _drain_quietly(alive)
        assert bound_queues(store.view, "test.pidbox") == {"alive.test.pidbox"}
    # A broadcast no longer piles up in the lapsed queue's list.
    with alive.Producer() as producer:
        producer.publish({"method": "ping"}, exchange=exchange)
    assert store.view.transient_size("dead.test.pidbox") == 0


def _drain_quietly(conn: kombu.Connection) -> None:
    with contextlib.suppress(TimeoutError):
        conn.drain_events(timeout=0.05)


def test_an_auto_delete_queue_is_unbound_when_its_consumer_goes(store: Store) -> None:
    exchange = kombu.Exchange("test.pidbox", type="fanout", durable=False)
    conn = store.connect()
    channel = conn.channel()
    consumer = kombu.Consumer(channel, [broadcast_queue("node", exchange)], no_ack=True)
    consumer.consume()
    assert bound_queues(store.view, "test.pidbox") == {"node.test.pidbox"}
    channel.close()  # a worker's warm shutdown closes its pidbox channel
    assert bound_queues(store.view, "test.pidbox") == set()
    with conn.Producer() as producer:
        producer.publish({"method": "shutdown"}, exchange=exchange)
    assert store.view.transient_size("node.test.pidbox") == 0


def test_a_broadcast_subscriber_hears_only_what_is_sent_once_it_consumes(
        store: Store) -> None:
    """A command sent to a worker's node queue before it consumes (while it was down, its
    binding not yet lapsed) is not replayed to it."""
    exchange = kombu.Exchange("test.pidbox", type="fanout", durable=False)
    conn, sender = store.connect(), store.connect()
    queue = broadcast_queue("node", exchange)
    queue(conn.default_channel).declare()
    with sender.Producer() as producer:
        producer.publish({"method": "shutdown"}, exchange=exchange)
    assert store.view.transient_size("node.test.pidbox") == 1
    got: list[Any] = []
    with kombu.Consumer(conn, [queue], callbacks=[lambda b, m: got.append(b)], no_ack=True):
        with sender.Producer() as producer:
            producer.publish({"method": "ping"}, exchange=exchange)
        wait_until(lambda: _drain_quietly(conn) or got, timeout=15, message="the ping")
    assert got == [{"method": "ping"}]


def test_a_reply_sent_before_its_collector_consumes_is_kept(store: Store) -> None:
    """Replies (a direct exchange) are not broadcasts: a worker may answer before the client's
    collecting consumer starts, as kombu's Mailbox does."""
    exchange = kombu.Exchange("reply.test.pidbox", type="direct", durable=False)
    client, worker = store.connect(), store.connect()
    queue = kombu.Queue("oid.reply.test.pidbox", exchange, "oid", auto_delete=True,
                        expires=10.0)
    queue(client.default_channel).declare()
    with worker.Producer() as producer:
        producer.publish({"w1": {"ok": "pong"}}, exchange=exchange, routing_key="oid")
    got: list[Any] = []
    with kombu.Consumer(client, [queue], callbacks=[lambda b, m: got.append(b)], no_ack=True):
        wait_until(lambda: _drain_quietly(client) or got, timeout=15, message="the reply")
    assert got == [{"w1": {"ok": "pong"}}]


def test_a_job_redelivered_after_a_requeue_is_flagged_redelivered(store: Store) -> None:
    conn = store.connect()
    publish_task(conn, "r-1")
    seen: list[tuple[bool, Any]] = []

    def on_message(body: Any, message: Any) -> None:
        seen.append((message.delivery_info.get("redelivered", False),
                     message.headers.get("redelivered")))
        if len(seen) == 1:
            message.reject(requeue=True)
        else:
            message.ack()

    with kombu.Consumer(conn, [kombu.Queue("celery", routing_key="celery")],
                        callbacks=[on_message]):
        wait_until(lambda: _drain_quietly(conn) or len(seen) >= 2, timeout=20,
                   message="the redelivery")
    assert seen == [(False, None), (True, True)]
    inspect = inspector_for(store.view)
    wait_until(lambda: (inspect.job("r-1") or {}).get("st") == "completed", timeout=10,
               message="the ack")
    assert json.loads(store.view.raw_message("r-1") or b"{}")["headers"].get("redelivered") \
        is None, "the stored message is delivered as published; the flag is per delivery"
