"""Redis-specific store tests: the key layout of ``lua/lib.lua`` and the messages' raw bytes.

Every rule both backends share is proved by the conformance suite (tests/fast/conformance), through
the Backend interface only. What is left here is what only the Redis store has: the key schema
documented at the top of ``lua/lib.lua`` (which operators, the admin and the end-to-end tests
read directly), the message stored as its exact bytes in the job hash, the capped wake-up
lists, and the index entries ``purge.lua`` must leave behind (none).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import redis

from celery_plus.model.store import Settle
from celery_plus.stores.redis.backend import RedisBackend
from celery_plus.stores.redis.envelope import MARK, deflated, envelope_bytes
from tests.fast.conformance.stores import REDIS_URL
from tests.fast.conformance.support import Q, claim, ids, maintain, publish


def test_key_layout_follows_the_schema_in_lib_lua(
        make_redis: Callable[..., RedisBackend], raw: redis.Redis) -> None:
    store = make_redis(lease_ms=60_000, backstop_ms=600_000)
    P = store.prefix
    publish(store, "a", unique_lock="L", unique_window="running", concurrency_group="g",
            concurrency_limit=1)
    publish(store, "b", concurrency_group="g", concurrency_limit=1)
    due = store.now_ms() + 60_000
    publish(store, "c", eta_ms=due)
    publish(store, "d")
    score = {i: float(raw.hget(f"{P}:job:{i}", "score")) for i in "abd"}  # type: ignore[arg-type]
    assert raw.zrange(f"{P}:q:{Q}", 0, -1, withscores=True) == [
        ("a", score["a"]), ("b", score["b"]), ("d", score["d"])]
    assert raw.zrange(f"{P}:sched", 0, -1, withscores=True) == [("c", due)]
    assert raw.hget(f"{P}:job:c", "st") == "scheduled"
    assert raw.get(f"{P}:u:L") == "a" and 590_000 < raw.pttl(f"{P}:u:L") <= 600_000
    assert raw.smembers(f"{P}:queues") == {Q}
    assert raw.llen(f"{P}:wake:{Q}") >= 1
    # Claim: a and d run (lease zset), a holds the slot, b is parked in its group's zset.
    result = claim(store)
    assert ids(result) == ["a", "d"] and result.blocked == ["b"]
    lease = raw.zscore(f"{P}:lease", "a")
    assert lease is not None and store.now_ms() + 50_000 < lease <= store.now_ms() + 60_000
    assert raw.smembers(f"{P}:slot:g") == {"a"}
    assert raw.zrange(f"{P}:blk:g", 0, -1, withscores=True) == [("b", score["b"])]
    assert raw.smembers(f"{P}:blkgroups") == {"g"}
    assert raw.hget(f"{P}:stats", "blocked") == "1"
    assert raw.zcard(f"{P}:q:{Q}") == 0
    # Settle: ack -> done zset, hold key gone, slot freed, b back in its queue with its score.
    tokens = {c.job_id: c.token for c in result.claims}
    store.settle([Settle("a", tokens["a"], "ack"), Settle("d", tokens["d"], "reject")])
    assert raw.zscore(f"{P}:done", "a") is not None and raw.exists(f"{P}:u:L") == 0
    assert raw.scard(f"{P}:slot:g") == 0 and raw.exists(f"{P}:blk:g") == 0
    assert raw.smembers(f"{P}:blkgroups") == set()
    assert raw.zrange(f"{P}:q:{Q}", 0, -1, withscores=True) == [("b", score["b"])]
    # Reject -> dead zset; neither leaves a lease entry.
    assert raw.zscore(f"{P}:dead", "d") is not None
    assert raw.zrange(f"{P}:lease", 0, -1) == []
    assert raw.hget(f"{P}:stats", "dead_lettered") == "1"
    # Maintenance takes the P:maint lock, held by the worker for its interval (a long one
    # here: the fixture's 1 ms throttle would let the lock expire before it is looked at).
    store.options = dataclasses.replace(store.options, maintenance_interval_ms=60_000)
    maintain(store)
    assert raw.get(f"{P}:maint") == "w"
    assert 0 < raw.pttl(f"{P}:maint") <= 60_000


def test_the_message_is_stored_as_its_exact_bytes_next_to_the_job_hash(
        redis_store: RedisBackend) -> None:
    redis_store.options = dataclasses.replace(redis_store.options, deflate=False)
    message = b"\xff\xfe{\"not\": utf8} \x00" + MARK  # bytes as they come, the mark too
    redis_store.push_raw(Q, "raw", message)
    client = redis.Redis.from_url(REDIS_URL)
    try:
        assert client.get(redis_store.key("m", "raw")) == message  # plus_redis_deflate off
        assert not client.hexists(redis_store.key("job", "raw"), "msg")
    finally:
        client.close()
    assert claim(redis_store).claims[0].message == message


def test_a_message_that_starts_as_a_deflated_one_is_delivered_exact(
        redis_store: RedisBackend) -> None:
    """Undeflated envelopes and deflated ones share a key: a published message that starts
    with the deflated form's mark (and inflates) is deflated itself, so it comes back as sent."""
    message = deflated(b'{"a": 1}')
    assert envelope_bytes(message) != message
    redis_store.push_raw(Q, "marked", message)
    assert claim(redis_store).claims[0].message == message


def test_envelopes_are_deflated_by_default(make_redis: Callable[..., RedisBackend]) -> None:
    store = make_redis()  # plus_redis_deflate's default (issue #17's memory bound)
    message = b'{"body": "e30=", "headers": {}}'
    store.push_raw(Q, "deflated", message)
    client = redis.Redis.from_url(REDIS_URL)
    try:
        stored = client.get(store.key("m", "deflated"))
        assert stored.startswith(MARK) and envelope_bytes(stored) == message
    finally:
        client.close()
    assert claim(store).claims[0].message == message


def test_wake_up_lists_are_capped(redis_store: RedisBackend, raw: redis.Redis) -> None:
    lengths = []
    for i in range(100):
        publish(redis_store, f"j{i}")
        lengths.append(raw.llen(redis_store.key("wake", Q)))
    assert lengths[:64] == list(range(1, 65))
    assert max(lengths) == 64 and lengths[64] == 32  # cut back to 32 past the cap


def test_purge_leaves_no_index_entry_of_the_purged_jobs(
        redis_store: RedisBackend, raw: redis.Redis) -> None:
    store = redis_store
    publish(store, "run", concurrency_group="g", concurrency_limit=1)
    claim(store)
    publish(store, "parked", concurrency_group="g", concurrency_limit=1)
    publish(store, "parked-other", concurrency_group="g", concurrency_limit=1, queue="other")
    assert claim(store, queues=(Q, "other")).blocked == ["parked", "parked-other"]
    publish(store, "ready", unique_lock="P", unique_window="pending")
    publish(store, "later", eta_ms=store.now_ms() + 60_000, unique_lock="T",
            unique_window="ttl", unique_ttl_ms=60_000)
    publish(store, "later-other", eta_ms=store.now_ms() + 60_000, queue="other")
    assert store.purge(Q) == 3
    assert raw.exists(store.key("q", Q)) == 0
    assert raw.zrange(store.key("sched"), 0, -1) == ["later-other"]
    assert raw.zrange(store.key("blk", "g"), 0, -1) == ["parked-other"]
    assert raw.smembers(store.key("blkgroups")) == {"g"}
    assert raw.exists(store.key("u", "P")) == 0
    assert raw.get(store.key("u", "T")) == "later", "a ttl hold was released early"
    for gone in ("parked", "ready", "later"):
        assert raw.exists(store.key("job", gone)) == 0
    assert store.purge("other") == 2
    assert raw.exists(store.key("blk", "g")) == 0 and raw.smembers(store.key("blkgroups")) == set()
    assert raw.smembers(store.key("slot", "g")) == {"run"}


def test_settle_lua_decodes_a_detail_before_it_ends_the_claim(
        make_redis: Callable[..., RedisBackend], raw: redis.Redis) -> None:
    """A detail another client sends that is not a JSON object (or holds non-text values)
    is kept as a note: the batch lands and no claim is left running without a lease."""
    store = make_redis()
    P = store.prefix
    for job_id in "abcd":
        publish(store, job_id)
    tok = {c.job_id: c.token for c in claim(store).claims}
    reply = store.scripts.run("settle", [
        P, store.backstop_ms,
        "a", tok["a"], "fail", "{not json", "",
        "b", tok["b"], "fail", '"just a string"', "",
        "c", tok["c"], "fail", '{"exc_type": {"x": [1]}, "exc_message": 5, "tb": null}', "",
        "d", tok["d"], "ack", "", ""])
    assert reply[0] == 4
    assert raw.hget(f"{P}:job:a", "emsg") == "failure details could not be decoded"
    assert raw.hget(f"{P}:job:b", "st") == "failed"
    assert raw.hmget(f"{P}:job:c", "etype", "emsg") == ['{"x":[1]}', "5"]
    assert raw.hget(f"{P}:job:d", "st") == "completed"
    assert raw.zcard(f"{P}:lease") == 0


def test_publish_lua_takes_every_text_field_as_its_own_argument(
        make_redis: Callable[..., RedisBackend], raw: redis.Redis) -> None:
    """The numbers travel together; text (name, key, window, group) may hold any separator."""
    store = make_redis()
    lock, group, name = "t:a=1\x1fb=2\x1fc= 3", "g\x1f{x}:y", "task\x1fname"
    publish(store, "a", name=name, unique_lock=lock, unique_window="running",
            concurrency_group=group, concurrency_limit=2)
    assert raw.hmget(f"{store.prefix}:job:a", "name", "uk", "cg", "cl") == [name, lock, group, "2"]
    assert raw.get(f"{store.prefix}:u:{lock}") == "a"
    assert raw.zscore(f"{store.prefix}:hexp", lock) is not None


def test_tokens_come_from_one_counter_above_every_older_token(
        make_redis: Callable[..., RedisBackend], raw: redis.Redis) -> None:
    """A record written before the counter existed (per-job tokens) still gets a higher one."""
    store = make_redis()
    P = store.prefix
    publish(store, "old")
    raw.hset(f"{P}:job:old", "tok", 41)
    publish(store, "new")
    got = {c.job_id: c.token for c in claim(store).claims}
    assert got["old"] == 42 and got["new"] > 42 and int(raw.get(f"{P}:tok")) >= got["new"]


def test_the_hold_renewal_index_keeps_only_holds_that_may_need_renewing(
        make_redis: Callable[..., RedisBackend], raw: redis.Redis) -> None:
    """P:hexp has an entry per non-TTL hold set; a released hold leaves it at once."""
    store = make_redis()
    P = store.prefix
    publish(store, "a", unique_lock="A", unique_window="running")
    publish(store, "p", unique_lock="P", unique_window="pending")
    publish(store, "t", unique_lock="T", unique_window="ttl", unique_ttl_ms=60_000)
    assert set(raw.zrange(f"{P}:hexp", 0, -1)) == {"A", "P"}
    got = {c.job_id: c.token for c in claim(store).claims}
    assert set(raw.zrange(f"{P}:hexp", 0, -1)) == {"A"}  # the pending hold left at the claim
    store.settle([Settle("a", got["a"], "ack")])
    assert raw.zcard(f"{P}:hexp") == 0 and raw.exists(f"{P}:u:T")


def test_a_raw_message_starting_with_the_deflate_mark_is_delivered_as_published(
        make_redis: Callable[..., RedisBackend]) -> None:
    # The default layout stores a message in the hash as it came: one that happens to start
    # like a deflated envelope is not one, and reaches the worker unchanged.
    store = make_redis(compact_records=False)
    message = MARK + b"\xff not a deflate stream"
    store.push_raw(Q, "marked", message)
    assert store.raw_message("marked") == message
    assert claim(store).claims[0].message == message
