"""Conformance: ``migrate-queue`` moves a legacy kombu Redis queue into every store.

The legacy side is kombu's Redis layout under a unique ``global_keyprefix`` on the test Redis,
filled by a plain Celery app. On the Redis store (same server) each batch is one Lua script
(``ScriptMover``); on SQLite and PostgreSQL messages go through the staging list
(``StagedMover``). Both must keep the same rules: every message once by task id, in kombu's
delivery order; malformed ones dead-lettered with their bytes; unacked entries only when
asked and old enough; resumable, idempotent, dry run read-only.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import celery
import pytest
import redis
from kombu.utils.json import dumps, loads

from celery_plus.model.store import Backend, NewJob
from celery_plus.queue_migration.layout import KombuLayout
from celery_plus.queue_migration.migrate import (
    Lock,
    MigrateOptions,
    MigrationError,
    Source,
    Tally,
    migrate,
)
from celery_plus.queue_migration.movers import ScriptMover
from celery_plus.stores.redis.backend import RedisBackend
from tests.fast.conformance.stores import OPENERS, REDIS_URL
from tests.fast.conformance.support import Q, claim, ids, publish, record


@pytest.fixture(params=sorted(OPENERS))
def backend_kind(request: pytest.FixtureRequest) -> str:
    """Every store as the migration's target, the in-process ones too (the source, plain
    Celery's kombu layout, is always Redis: so the module lives in the server tier)."""
    return str(request.param)


@pytest.fixture
def legacy() -> Iterator[tuple[Any, Source]]:
    """(plain Celery app publishing to kombu's layout, migration source of queue Q)."""
    gkp = f"k{uuid.uuid4().hex[:10]}:"
    app = celery.Celery("legacy", broker=REDIS_URL, set_as_current=False)
    app.conf.broker_transport_options = {"global_keyprefix": gkp}
    client = redis.Redis.from_url(REDIS_URL)
    yield app, Source(client, KombuLayout(global_keyprefix=gkp), Q)
    app.close()
    keys = list(client.scan_iter(f"{gkp}*", count=1000))
    if keys:
        client.delete(*keys)
    client.close()


def send(app: Any, n: int, **options: Any) -> list[str]:
    """Publish ``n`` plain Celery task messages to Q; their task ids, in order."""
    return [app.send_task("legacy.task", (i,), queue=Q, **options).id for i in range(n)]


def run(source: Source, backend: Backend, **options: Any) -> Tally:
    return migrate(source, backend, MigrateOptions(queue=Q, batch_size=3, **options))


def pending(source: Source) -> int:
    return sum(int(source.client.llen(key)) for key in source.lists())


def everything(backend: Backend) -> list[str]:
    return ids(claim(backend, max_jobs=1000))


def test_pending_messages_move_once_in_kombus_order_byte_for_byte(legacy, backend):
    app, source = legacy
    sent = [(task_id, p) for p in (9, 0, 4) for task_id in send(app, 4, priority=p)]
    raw = {loads(r)["headers"]["id"]: r
           for key in source.layout.priority_lists(Q) for r in source.client.lrange(key, 0, -1)}
    tally = run(source, backend)
    assert (tally.moved, tally.present, tally.malformed, tally.planned) == (12, 0, 0, 12)
    assert pending(source) == 0
    assert backend.raw_message(sent[0][0]) == raw[sent[0][0]]
    # The store orders by priority (lower first), FIFO within one.
    expected = [t for t, _ in sorted(sent, key=lambda pair: pair[1])]
    assert everything(backend) == expected


def test_a_rerun_moves_nothing(legacy, backend):
    app, source = legacy
    sent = send(app, 5)
    assert run(source, backend).moved == 5
    again = run(source, backend)
    assert (again.done, again.planned) == (0, 0)
    assert sorted(everything(backend)) == sorted(sent)


def test_a_message_whose_task_id_the_store_has_is_dropped_as_a_copy(legacy, backend):
    app, source = legacy
    first, second = send(app, 2)
    publish(backend, first, message="durable copy")
    tally = run(source, backend)
    assert (tally.moved, tally.present) == (1, 1)
    assert backend.raw_message(first) == b"durable copy"
    assert sorted(everything(backend)) == sorted([first, second])


def test_an_interrupted_move_resumes_from_staging_without_loss_or_duplicates(legacy, backend):
    app, source = legacy
    sent = send(app, 6)
    # A run that died after taking the 3 oldest messages to staging and storing 2 of them.
    staged = []
    for _ in range(3):
        staged.append(source.client.lmove(source.layout.priority_lists(Q)[0],
                                          source.staging, "RIGHT", "LEFT"))
    for raw in staged[:2]:
        item = source.item(raw)
        assert item.job is not None
        backend.publish(item.job)
    tally = run(source, backend)
    assert (tally.moved, tally.present) == (4, 2)
    assert source.client.llen(source.staging) == 0
    assert everything(backend) == sent  # staging (the oldest) first, each once


def test_malformed_messages_are_dead_lettered_with_their_raw_bytes(legacy, backend, inspect):
    app, source = legacy
    sent = send(app, 2)
    source.client.lpush(source.layout.priority_lists(Q)[0], b"\xffnot json", b'{"no": 1}')
    tally = run(source, backend)
    assert (tally.moved, tally.malformed) == (2, 2)
    dead = inspect.ids_in_state("failed")
    assert sorted(backend.raw_message(d) for d in dead) == [b'{"no": 1}', b"\xffnot json"]
    assert {record(backend, d).reason for d in dead} == {"malformed message"}
    assert {record(backend, d).queue for d in dead} == {f"{Q}.malformed"}
    assert sorted(everything(backend)) == sorted(sent)


def test_a_malformed_message_parked_by_an_interrupted_run_is_dead_lettered(legacy, backend):
    _, source = legacy
    backend.push_raw(source.side_queue, "malformed-x", b"\x00parked")
    assert run(source, backend).malformed == 1
    assert record(backend, "malformed-x").state == "failed"


def test_eta_messages_wait_scheduled_in_the_store(legacy, backend):
    app, source = legacy
    (later,) = send(app, 1, countdown=600)
    run(source, backend)
    assert record(backend, later).state == "scheduled"


def test_a_unique_key_held_by_another_job_coalesces_the_legacy_copy(legacy, backend, inspect):
    _, source = legacy
    publish(backend, "holder", unique_lock="k1", unique_window="pending")
    message = {"body": "", "content-encoding": "utf-8", "content-type": "application/json",
               "headers": {"id": "copy", "task": "legacy.task", "plus": {"u": ["k1", "pending",
                                                                            0]}},
               "properties": {"delivery_tag": "t", "delivery_info": {}, "priority": 0}}
    source.client.lpush(source.layout.priority_lists(Q)[0], dumps(message))
    tally = run(source, backend)
    assert (tally.moved, tally.coalesced) == (0, 1)
    assert inspect.holder("k1") == "holder"


def hold_unacked(app: Any, n: int) -> list[str]:
    """Take ``n`` messages as a kombu consumer would, without acking: the unacked hash."""
    held = []
    with app.connection_for_read() as conn:
        channel = conn.default_channel
        for _ in range(n):
            message = channel.basic_get(Q)
            held.append(message.headers["id"])
        channel.qos.restore_at_shutdown = False  # as a worker that died holding them
        channel.qos._delivered.clear()
    return held


def test_unacked_entries_move_only_when_asked_and_older_than_the_cutoff(legacy, backend):
    app, source = legacy
    sent = send(app, 4)
    held = hold_unacked(app, 2)
    assert held == sent[:2]
    tally = run(source, backend)
    assert (tally.moved, tally.unacked_left) == (2, 2)
    tally = run(source, backend, include_unacked=True)  # too recent: a worker may hold them
    assert (tally.moved, tally.unacked_left) == (0, 2)
    tally = run(source, backend, include_unacked=True, unacked_older_than=0)
    assert (tally.moved, tally.from_unacked, tally.unacked_left) == (2, 2, 0)
    assert source.client.hlen(source.layout.unacked) == 0
    assert source.client.zcard(source.layout.unacked_index) == 0
    assert sorted(everything(backend)) == sorted(sent)


def test_unacked_entries_of_other_queues_stay(legacy, backend):
    app, source = legacy
    app.send_task("legacy.task", (1,), queue="other")
    with app.connection_for_read() as conn:
        channel = conn.default_channel
        channel.basic_get("other")
        channel.qos.restore_at_shutdown = False
        channel.qos._delivered.clear()
    tally = run(source, backend, include_unacked=True, unacked_older_than=0)
    assert (tally.done, tally.unacked_left) == (0, 0)
    assert source.client.hlen(source.layout.unacked) == 1


def test_a_dry_run_counts_and_changes_nothing(legacy, backend):
    app, source = legacy
    first, *_ = send(app, 3)
    publish(backend, first)
    source.client.lpush(source.layout.priority_lists(Q)[0], b"junk")
    tally = run(source, backend, dry_run=True)
    assert (tally.planned, tally.moved, tally.present, tally.malformed) == (4, 2, 1, 1)
    assert pending(source) == 4
    assert everything(backend) == [first]


def test_one_migration_of_a_queue_at_a_time(legacy, backend):
    app, source = legacy
    send(app, 1)
    other = Lock(source.client, source.layout.lock(Q))
    other.acquire()
    with pytest.raises(MigrationError, match="another migrate-queue"):
        run(source, backend)
    other.release()
    assert run(source, backend).moved == 1


def test_the_lock_of_a_dead_process_on_this_host_is_taken_over(legacy, backend):
    import socket
    import subprocess
    import sys

    app, source = legacy
    send(app, 1)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    source.client.set(source.layout.lock(Q),
                      f"{socket.gethostname()}:{dead.stdout.strip()}:0", px=60_000)
    assert run(source, backend).moved == 1


@pytest.mark.parametrize("backend_kind", ["redis"])  # the Lua mover runs on Redis stores only
def test_the_move_script_takes_nothing_when_the_tail_changed(legacy, backend):
    assert isinstance(backend, RedisBackend)
    app, source = legacy
    (task_id,) = send(app, 1)
    key = source.layout.priority_lists(Q)[0]
    mover = ScriptMover(source, backend)
    stale = source.item(b'{"properties": {}, "headers": {"id": "gone"}}')
    reply = mover._run("list", key, "", [stale, source.item(source.client.lindex(key, -1))])
    assert list(reply) == [0, 0, 0, 0, 0]
    assert source.client.llen(key) == 1 and backend.record(task_id) is None
    assert isinstance(stale.job, NewJob)
