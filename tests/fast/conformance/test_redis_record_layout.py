"""Conformance (Redis): job records stored by a release before the compact layout (issue #17).

The compact layout keeps a job's envelope (as published, or deflated with
``plus_redis_deflate``: ``stores/redis/envelope.py``) in its own string key ``P:m:{id}`` next to
the hash ``P:job:{id}`` (so the hash stays a listpack); an older release kept it in the hash's
``msg`` field. During a rolling upgrade the new scripts meet such records: they must be
claimed (their message delivered as stored), acked, dead-lettered, shown and searched by the
admin, purged, replaced by a publish of the same id, and pruned with nothing left behind. The
old record is written here with redis-py, field by field as ``lua/lib.lua``'s schema says.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from celery_plus.admin import Admin, admin_for
from celery_plus.model import formats
from celery_plus.model.options import StoreOptions
from celery_plus.model.store import Backend, Settle, WorkerBeat
from celery_plus.stores.readers import Readers
from celery_plus.stores.redis.backend import RedisBackend
from celery_plus.stores.redis.envelope import MARK, envelope_bytes
from tests.inspectors import inspector_for

from .support import Q, claim, ids, maintain, publish, record
from .test_admin import envelope, listed

pytestmark = pytest.mark.not_queue_scoped(
    "the standalone server's record layout, written and read key by key with a"
    " standalone client")

TASK = "proj.old"


@pytest.fixture
def redis_backend(backend_kind: str, make_backend: Callable[..., Backend]) -> RedisBackend:
    """A backend writing the compact layout, its envelopes deflated (on both Redis variants:
    scripts as functions and with EVALSHA)."""
    if not backend_kind.startswith("redis"):
        pytest.skip("the record layout of the Redis store")
    backend = make_backend(compact_records=True, deflate=True)
    assert isinstance(backend, RedisBackend)
    return backend


@pytest.fixture
def admin(redis_backend: RedisBackend) -> Iterator[Admin]:
    with Admin(admin_for(redis_backend)) as opened:
        yield opened


def old_job(backend: RedisBackend, job_id: str, queue: str = Q, args: list[int] | None = None
            ) -> str:
    """Store an enqueued job the way the previous layout did: the envelope in the hash."""
    message = envelope(job_id, TASK, args or [1])
    client = backend.client
    seq = int(client.incr(backend.key("seq")))
    now = backend.now_ms()
    client.hset(backend.key("job", job_id), mapping={
        "msg": message, "q": queue, "name": TASK, "score": seq, "dl": 0, "mdl": 0,
        "enq": now, "due": 0, "st": "enqueued"})
    client.zadd(backend.key("q", queue), {job_id: seq})
    client.sadd(backend.key("queues"), queue)
    assert not client.exists(backend.key("m", job_id))
    return message


def keys_of(backend: RedisBackend, job_id: str) -> int:
    return int(backend.client.exists(backend.key("job", job_id), backend.key("m", job_id)))


def stored_envelope(backend: RedisBackend, job_id: str) -> bytes:
    """``P:m:{id}`` inflated, after checking it is stored deflated."""
    stored = backend.client.get(backend.key("m", job_id))
    assert stored is not None and stored.startswith(MARK)
    return envelope_bytes(stored)


def test_a_new_job_keeps_its_envelope_out_of_a_small_hash(redis_backend: RedisBackend) -> None:
    message = envelope("new", TASK, [1]) + " " * 200  # longer than hash-max-listpack-value
    assert publish(redis_backend, "new", message, name=TASK).accepted
    client = redis_backend.client
    assert stored_envelope(redis_backend, "new") == message.encode()
    assert client.strlen(redis_backend.key("m", "new")) < len(message) / 2
    assert not client.hexists(redis_backend.key("job", "new"), "msg")
    assert client.object("encoding", redis_backend.key("job", "new")) == b"listpack"
    assert inspector_for(redis_backend).job("new")["msg"] == message  # type: ignore[index]
    assert redis_backend.raw_message("new") == message.encode()


def test_with_deflate_off_the_envelope_is_kept_as_published_out_of_a_small_hash(
        redis_backend: RedisBackend, make_backend: Callable[..., Backend]) -> None:
    backend = make_backend(compact_records=True, deflate=False)  # plus_redis_deflate = False
    message = envelope("plain", TASK, [1]) + " " * 200
    assert publish(backend, "plain", message, name=TASK).accepted
    client = redis_backend.client
    assert client.get(redis_backend.key("m", "plain")) == message.encode()
    assert client.object("encoding", redis_backend.key("job", "plain")) == b"listpack"
    assert redis_backend.raw_message("plain") == message.encode()  # read by the deflating one
    got = claim(redis_backend).claims
    assert [c.job_id for c in got] == ["plain"] and got[0].message == message.encode()


def test_an_old_record_is_claimed_acked_shown_and_pruned(
        redis_backend: RedisBackend, make_backend: Callable[..., Backend],
        admin: Admin) -> None:
    message = old_job(redis_backend, "old", args=[4242])
    assert inspector_for(redis_backend).job("old")["msg"] == message  # type: ignore[index]
    assert redis_backend.raw_message("old") == message.encode()
    assert listed(admin, "enqueued", text="4242") == ["old"]
    got = claim(redis_backend).claims
    assert [c.job_id for c in got] == ["old"] and got[0].message == message.encode()
    shown = admin.show("old")
    assert shown.args == [4242] and shown.headers["task"] == TASK
    assert shown.raw_message == message
    redis_backend.settle([Settle("old", got[0].token, "ack")])
    assert record(redis_backend, "old").state == "completed"
    assert record(redis_backend, "old").message == message
    pruning = make_backend(retention=(600_000, 0, 600_000, 0))
    maintain(pruning)
    assert redis_backend.record("old") is None and keys_of(redis_backend, "old") == 0


def test_an_old_dead_letter_is_listed_searched_and_deleted(
        redis_backend: RedisBackend, admin: Admin) -> None:
    message = old_job(redis_backend, "dead", args=[777])
    got = claim(redis_backend).claims
    assert got[0].message == message.encode()
    redis_backend.settle([Settle("dead", got[0].token, "fail", {
        "reason": "task failed", "exc_type": "ValueError", "exc_message": "boom"})])
    assert listed(admin, "failed") == ["dead"]
    assert listed(admin, "failed", text="777") == ["dead"]
    assert admin.show("dead").args == [777]
    assert admin.purge("failed", all=True).changed
    assert keys_of(redis_backend, "dead") == 0


def test_an_old_record_published_again_is_stored_once_in_the_compact_layout(
        redis_backend: RedisBackend) -> None:
    old_job(redis_backend, "again")
    fresh = envelope("again", TASK, [2])
    assert publish(redis_backend, "again", fresh, name=TASK).accepted
    client = redis_backend.client
    assert not client.hexists(redis_backend.key("job", "again"), "msg")
    assert stored_envelope(redis_backend, "again") == fresh.encode()
    got = claim(redis_backend).claims
    assert ids(claim(redis_backend)) == [] and got[0].message == fresh.encode()


def test_an_old_waiting_record_is_purged_with_its_queue(redis_backend: RedisBackend) -> None:
    old_job(redis_backend, "p1")
    assert publish(redis_backend, "p2", name=TASK).accepted
    assert redis_backend.purge(Q) == 2
    assert keys_of(redis_backend, "p1") == 0 and keys_of(redis_backend, "p2") == 0


def test_with_compact_records_off_a_publish_keeps_the_older_layout(
        redis_backend: RedisBackend, make_backend: Callable[..., Backend]) -> None:
    older = make_backend(compact_records=False)
    assert publish(redis_backend, "j", "first", name=TASK).accepted  # compact, then again:
    assert publish(older, "j", "second", name=TASK).accepted
    client = redis_backend.client
    assert client.hget(redis_backend.key("job", "j"), "msg") == b"second"
    assert not client.exists(redis_backend.key("m", "j"))
    assert inspector_for(redis_backend).job("j")["msg"] == "second"  # type: ignore[index]
    got = claim(redis_backend).claims
    assert got[0].message == b"second"


def test_the_setting_reaches_the_store_options() -> None:
    from celery_plus import settings
    from celery_plus.model.options import StoreOptions

    # On by default; off is the rolling-upgrade switch (earlier workers read only the hash).
    assert StoreOptions.of(settings.resolve({})).compact_records is True
    assert StoreOptions().compact_records is True
    off = settings.resolve({"plus_redis_compact_records": False})
    assert StoreOptions.of(off).compact_records is False


def test_a_publisher_writes_the_hash_layout_while_a_live_worker_cannot_read_the_compact_one(
        redis_backend: RedisBackend, make_backend: Callable[..., Backend]) -> None:
    """A live worker whose record says it reads JSON only (not ``z1``): a publisher with
    the compact layout on writes the envelope in the hash, which every release reads, until
    a look at the records (a publisher process started now: one look per
    ``readers.LOOK_EVERY``, shared by its connections to the store) finds no such worker."""
    redis_backend.worker_beat(WorkerBeat(node="old@h", host="h", pid=1, interval_ms=60_000,
                                         reads=(formats.JSON,)))
    redis_backend.worker_beat(WorkerBeat(node="new@h", host="h", pid=2, interval_ms=60_000,
                                         reads=formats.READS))
    message = envelope("held", TASK, [1])
    assert publish(redis_backend, "held", message, name=TASK).accepted
    assert redis_backend.client.hget(redis_backend.key("job", "held"), "msg") == message.encode()
    assert not redis_backend.client.exists(redis_backend.key("m", "held"))
    assert [c.message for c in claim(redis_backend).claims] == [message.encode()]
    # The old worker upgraded: a look after it finds every live worker reading z1.
    redis_backend.worker_beat(WorkerBeat(node="old@h", host="h", pid=3, interval_ms=60_000,
                                         reads=formats.READS))
    upgraded = RedisBackend(redis_backend.url, redis_backend.options,
                            readers=Readers("plus_redis_compact_records = False"))
    upgraded.scripts.functions = redis_backend.scripts.functions
    try:
        assert upgraded.writes_compact()
        assert publish(upgraded, "compact", envelope("compact", TASK, [1]), name=TASK).accepted
        assert stored_envelope(upgraded, "compact") == envelope("compact", TASK, [1]).encode()
    finally:
        upgraded.close()


def test_the_connections_of_a_process_to_a_store_share_one_look(
        redis_backend: RedisBackend, make_backend: Callable[..., Backend]) -> None:
    """Each kombu connection opens its own backend (``broker_pool_limit = 0``: one per
    publish); they share one look at the worker records, not one each."""
    assert redis_backend.writes_compact()  # looked: no worker, every live one reads z1
    redis_backend.worker_beat(WorkerBeat(node="old@h", host="h", pid=1, interval_ms=60_000,
                                         reads=(formats.JSON,)))
    other = make_backend(compact_records=True, deflate=True)
    assert isinstance(other, RedisBackend) and other.readers is redis_backend.readers
    assert other.writes_compact()  # the process's last look, not a look of its own
    elsewhere = RedisBackend(redis_backend.url, StoreOptions(prefix="o" + redis_backend.prefix))
    try:
        assert elsewhere.readers is not redis_backend.readers  # another store
    finally:
        elsewhere.close()
