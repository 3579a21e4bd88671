"""Store-level tests of the Redis Lua semantics (no worker process).

Covers the store rules of the foundation issue (DESIGN.md §3.2-§3.6): byte-for-byte delivery,
priority/FIFO order and batched claims, fenced settles, the pending/running/ttl uniqueness
windows and duplicate publishes, continuations, concurrency slots and parked jobs, heartbeats,
lease recovery by the stored deadline, delivery limits, dead letters, ETA scheduling and the
maintenance pass (pruning, unblocking). Each test is named after the rule it proves.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

import redis

from celery_plus.transport.backend import NewJob, Settle
from celery_plus.transport.redis_backend import RedisBackend

Q = "jobs"


def wait_until(predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02,
               message: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


def publish(backend: RedisBackend, job_id: str, message: str | None = None, **kw: Any) -> Any:
    kw.setdefault("queue", Q)
    return backend.publish(NewJob(id=job_id, message=message or f"msg-{job_id}", **kw))


def claim(backend: RedisBackend, max_jobs: int = 10, worker: str = "w1",
          queues: tuple[str, ...] = (Q,), settles: tuple[Settle, ...] = ()) -> Any:
    return backend.claim(list(queues), worker, max_jobs, settles)


def job(raw: redis.Redis, backend: RedisBackend, job_id: str) -> dict[str, str]:
    return raw.hgetall(backend.key("job", job_id))  # type: ignore[return-value]


def holder(raw: redis.Redis, backend: RedisBackend, lock: str) -> str | None:
    return raw.get(backend.key("u", lock))  # type: ignore[return-value]


def redis_now_ms(raw: redis.Redis) -> int:
    sec, usec = raw.time()  # type: ignore[misc]
    return int(sec) * 1000 + int(usec) // 1000


def maintain(backend: RedisBackend) -> None:
    """Run one maintenance pass (waiting out the 1 ms throttle of the previous one)."""
    wait_until(lambda: backend.maintain("w"), message="maintenance lock")


def ids(result: Any) -> list[str]:
    return [c.job_id for c in result.claims]


# -- delivery ---------------------------------------------------------------------------


def test_publish_then_claim_delivers_the_message_byte_for_byte(backend, raw):
    message = json.dumps({"body": "e30=", "headers": {"task": "t", "note": "héllo ✓ \u0000"},
                          "properties": {"x": [1, 2.5, None]}}, ensure_ascii=False)
    out = publish(backend, "a", message, name="t")
    assert out.accepted and out.state == "enqueued" and not out.continued
    result = claim(backend, worker="w1")
    assert len(result.claims) == 1
    got = result.claims[0]
    assert got.job_id == "a" and got.token == 1 and got.deliveries == 1 and got.queue == Q
    assert got.message == message.encode()
    record = job(raw, backend, "a")
    assert record["st"] == "running" and record["wk"] == "w1" and record["name"] == "t"


def test_claim_order_is_priority_then_fifo(backend):
    # Lower priority value first; equal priorities in publish order.
    for job_id, pri in [("p5a", 5), ("p0a", 0), ("p9", 9), ("p5b", 5), ("p0b", 0), ("p5c", 5)]:
        publish(backend, job_id, priority=pri)
    order = []
    for _ in range(6):
        order += ids(claim(backend, max_jobs=1))
    assert order == ["p0a", "p0b", "p5a", "p5b", "p5c", "p9"]
    assert ids(claim(backend)) == []


def test_claim_batches_up_to_max_jobs(backend):
    for i in range(7):
        publish(backend, f"j{i}")
    first = claim(backend, max_jobs=3)
    assert ids(first) == ["j0", "j1", "j2"]
    second = claim(backend, max_jobs=3)
    assert ids(second) == ["j3", "j4", "j5"]
    assert ids(claim(backend, max_jobs=3)) == ["j6"]
    assert ids(claim(backend, max_jobs=3)) == []
    assert backend.size(Q) == 0


def test_claims_of_several_queues_follow_the_given_order(backend):
    publish(backend, "b1", queue="b")
    publish(backend, "a1", queue="a")
    assert ids(claim(backend, queues=("a", "b"))) == ["a1", "b1"]


# -- fencing ----------------------------------------------------------------------------


def test_settle_is_fenced_by_token(backend, raw):
    publish(backend, "a")
    first = claim(backend).claims[0]
    backend.settle([Settle("a", first.token, "release")])
    second = claim(backend, worker="w2").claims[0]
    assert second.token == first.token + 1
    # Every settle with the stale token changes nothing.
    for action in ("ack", "fail", "reject", "requeue", "release"):
        assert backend.settle([Settle("a", first.token, action, {"reason": "late"})]) == []
        record = job(raw, backend, "a")
        assert record["st"] == "running" and record["wk"] == "w2", action
        assert raw.zscore(backend.key("lease"), "a") is not None
    assert raw.zcard(backend.key("done")) == 0 and raw.zcard(backend.key("dead")) == 0
    # A settle for an unknown token is no more effective.
    backend.settle([Settle("a", second.token + 5, "ack")])
    assert job(raw, backend, "a")["st"] == "running"
    # The current token settles.
    backend.settle([Settle("a", second.token, "ack")])
    assert job(raw, backend, "a")["st"] == "completed"
    assert raw.zscore(backend.key("lease"), "a") is None
    # And a settle of a finished job is a no-op too.
    backend.settle([Settle("a", second.token, "reject")])
    assert job(raw, backend, "a")["st"] == "completed"


# -- uniqueness holds -------------------------------------------------------------------


def test_ack_releases_running_hold_only_for_holder(make_backend, raw):
    backend = make_backend(backstop_ms=600)
    publish(backend, "a", unique_lock="L", unique_window="running")
    assert holder(raw, backend, "L") == "a"
    tok_a = claim(backend).claims[0].token
    # The backstop lets a stuck hold go; another job then takes the key.
    wait_until(lambda: holder(raw, backend, "L") is None, message="backstop expiry")
    assert publish(backend, "b", unique_lock="L", unique_window="running").accepted
    assert holder(raw, backend, "L") == "b"
    backend.settle([Settle("a", tok_a, "ack")])
    assert job(raw, backend, "a")["st"] == "completed"
    assert holder(raw, backend, "L") == "b", "a's ack released b's hold"
    # The holder's own ack releases it.
    long = make_backend()
    tok_b = claim(long).claims[0].token
    assert holder(raw, backend, "L") == "b"
    long.settle([Settle("b", tok_b, "ack")])
    assert holder(raw, backend, "L") is None


def test_running_hold_is_kept_while_running_and_released_by_dead_letter(backend, raw):
    publish(backend, "a", unique_lock="L", unique_window="running")
    tok = claim(backend).claims[0].token
    assert holder(raw, backend, "L") == "a"
    assert not publish(backend, "b", unique_lock="L", unique_window="running").accepted
    backend.settle([Settle("a", tok, "fail", {"reason": "task failed"})])
    assert holder(raw, backend, "L") is None
    assert publish(backend, "b", unique_lock="L", unique_window="running").accepted


def test_pending_hold_released_at_claim_and_retaken_on_requeue(backend, raw):
    publish(backend, "a", unique_lock="L", unique_window="pending")
    assert holder(raw, backend, "L") == "a"
    dup = publish(backend, "b", unique_lock="L", unique_window="pending")
    assert not dup.accepted and dup.holder_id == "a"
    tok = claim(backend).claims[0].token
    assert holder(raw, backend, "L") is None
    backend.settle([Settle("a", tok, "requeue")])
    assert job(raw, backend, "a")["st"] == "enqueued"
    assert holder(raw, backend, "L") == "a"
    dup = publish(backend, "c", unique_lock="L", unique_window="pending")
    assert not dup.accepted and dup.holder_id == "a"
    # The same applies to a graceful release.
    tok = claim(backend).claims[0].token
    assert holder(raw, backend, "L") is None
    backend.settle([Settle("a", tok, "release")])
    assert holder(raw, backend, "L") == "a"


def test_requeue_in_pending_window_coalesces_when_key_taken(backend, raw):
    publish(backend, "a", unique_lock="L", unique_window="pending")
    tok = claim(backend).claims[0].token
    assert publish(backend, "b", unique_lock="L", unique_window="pending").accepted
    assert holder(raw, backend, "L") == "b"
    backend.settle([Settle("a", tok, "requeue")])
    record = job(raw, backend, "a")
    assert record["st"] == "completed" and record["reason"] == "coalesced"
    assert holder(raw, backend, "L") == "b"
    assert raw.zrange(backend.key("q", Q), 0, -1) == ["b"]
    assert raw.hget(backend.key("stats"), "deduplicated") is not None


def test_ttl_hold_never_released_early(make_backend, raw):
    backend = make_backend()
    publish(backend, "a", unique_lock="T", unique_window="ttl", unique_ttl_ms=60_000)
    assert holder(raw, backend, "T") == "a"
    tok = claim(backend).claims[0].token
    assert holder(raw, backend, "T") == "a", "claim released a ttl hold"
    backend.settle([Settle("a", tok, "ack")])
    assert job(raw, backend, "a")["st"] == "completed"
    assert holder(raw, backend, "T") == "a", "ack released a ttl hold"
    assert raw.pttl(backend.key("u", "T")) > 50_000
    dup = publish(backend, "b", unique_lock="T", unique_window="ttl", unique_ttl_ms=60_000)
    assert not dup.accepted and dup.holder_id == "a"
    # Nor is it released by a dead letter or a requeue.
    publish(backend, "c", unique_lock="T2", unique_window="ttl", unique_ttl_ms=60_000)
    tok = claim(backend).claims[0].token
    backend.settle([Settle("c", tok, "requeue")])
    assert holder(raw, backend, "T2") == "c"
    tok = claim(backend).claims[0].token
    backend.settle([Settle("c", tok, "reject")])
    assert job(raw, backend, "c")["st"] == "failed"
    assert holder(raw, backend, "T2") == "c"
    # It goes when the TTL is over, and only then.
    publish(backend, "d", unique_lock="T3", unique_window="ttl", unique_ttl_ms=1_500)
    tok = claim(backend).claims[0].token
    backend.settle([Settle("d", tok, "ack")])
    assert holder(raw, backend, "T3") == "d"
    wait_until(lambda: holder(raw, backend, "T3") is None, message="ttl expiry")
    assert publish(backend, "e", unique_lock="T3", unique_window="ttl",
                   unique_ttl_ms=1_500).accepted


def test_duplicate_publish_returns_holder(backend, raw):
    first = publish(backend, "a", unique_lock="L", unique_window="running")
    assert first.accepted and first.holder_id is None
    dup = publish(backend, "b", "other message", unique_lock="L", unique_window="running")
    assert not dup.accepted and dup.holder_id == "a" and dup.job_id == "b"
    assert job(raw, backend, "b") == {}
    assert raw.zrange(backend.key("q", Q), 0, -1) == ["a"]
    assert job(raw, backend, "a")["msg"] == "msg-a"
    # Also while the holder runs.
    claim(backend)
    dup = publish(backend, "c", unique_lock="L", unique_window="running")
    assert not dup.accepted and dup.holder_id == "a"
    assert int(raw.hget(backend.key("stats"), "deduplicated") or 0) == 2


def test_republish_of_the_same_id_replaces_its_message(backend, raw):
    publish(backend, "a", "first", unique_lock="L", unique_window="running")
    again = publish(backend, "a", "second", unique_lock="L", unique_window="running")
    assert again.accepted and not again.continued
    assert raw.zrange(backend.key("q", Q), 0, -1) == ["a"]
    assert claim(backend).claims[0].message == b"second"


def test_continuation_settles_running_claim_and_keeps_running_hold(backend, raw):
    publish(backend, "a", "attempt-1", unique_lock="L", unique_window="running",
            concurrency_group="g", concurrency_limit=1)
    publish(backend, "x", concurrency_group="g", concurrency_limit=1)
    first = claim(backend, max_jobs=1).claims[0]
    assert raw.smembers(backend.key("slot", "g")) == {"a"}
    assert ids(claim(backend)) == [] and job(raw, backend, "x")["st"] == "blocked"
    # Retry / Task.replace: a new message with the running job's id.
    eta = redis_now_ms(raw) + 60_000
    out = publish(backend, "a", "attempt-2", eta_ms=eta, unique_lock="L",
                  unique_window="running", concurrency_group="g", concurrency_limit=1)
    assert out.accepted and out.continued and out.state == "scheduled"
    record = job(raw, backend, "a")
    assert record["st"] == "scheduled" and record["msg"] == "attempt-2"
    assert raw.zscore(backend.key("lease"), "a") is None
    assert "a" not in raw.smembers(backend.key("slot", "g"))
    assert job(raw, backend, "x")["st"] == "enqueued", "freed slot did not unblock"
    assert holder(raw, backend, "L") == "a"
    assert json.loads(record["hist"])[-1]["outcome"] == "retried"
    # The old delivery's ack is a fenced no-op.
    backend.settle([Settle("a", first.token, "ack")])
    assert job(raw, backend, "a")["st"] == "scheduled"
    assert holder(raw, backend, "L") == "a"
    assert not publish(backend, "b", unique_lock="L", unique_window="running").accepted
    # An immediate continuation is claimable with a new token.
    publish(backend, "a", "attempt-3", unique_lock="L", unique_window="running")
    claims = claim(backend, max_jobs=5).claims
    again = next(c for c in claims if c.job_id == "a")
    assert again.message == b"attempt-3" and again.token == first.token + 1


# -- concurrency slots ------------------------------------------------------------------


def test_slot_taken_atomically_with_claim_and_full_group_parks_job(make_backend, raw):
    one, two = make_backend(), make_backend()
    for i in range(3):
        publish(one, f"g{i}", concurrency_group="g", concurrency_limit=2)
    result = claim(one, max_jobs=3)
    assert ids(result) == ["g0", "g1"] and result.blocked == ["g2"]
    assert raw.smembers(one.key("slot", "g")) == {"g0", "g1"}
    record = job(raw, one, "g2")
    assert record["st"] == "blocked"
    assert raw.zrange(one.key("blk", "g"), 0, -1) == ["g2"]
    assert raw.sismember(one.key("blkgroups"), "g")
    assert raw.zcard(one.key("q", Q)) == 0
    # Another worker sees no free slot either.
    publish(two, "g3", concurrency_group="g", concurrency_limit=2)
    result = claim(two, worker="w2")
    assert ids(result) == [] and result.blocked == ["g3"]
    assert raw.scard(one.key("slot", "g")) == 2


def test_parked_job_does_not_block_other_groups(backend, raw):
    publish(backend, "g1", concurrency_group="g", concurrency_limit=1)
    publish(backend, "g2", concurrency_group="g", concurrency_limit=1)
    publish(backend, "g3", concurrency_group="g", concurrency_limit=1)
    publish(backend, "h1", concurrency_group="h", concurrency_limit=1)
    publish(backend, "free")
    assert ids(claim(backend, max_jobs=1)) == ["g1"]
    result = claim(backend, max_jobs=2)
    assert ids(result) == ["h1", "free"]
    assert result.blocked == ["g2", "g3"]
    assert raw.smembers(backend.key("slot", "h")) == {"h1"}


def test_freed_slot_unblocks_parked_job_in_order(backend, raw):
    for name in ("a", "b", "c"):
        publish(backend, name, concurrency_group="g", concurrency_limit=1)
    a = claim(backend, max_jobs=1).claims[0]
    assert claim(backend).blocked == ["b", "c"]
    publish(backend, "later")
    backend.settle([Settle("a", a.token, "ack")])
    assert job(raw, backend, "b")["st"] == "enqueued"
    assert job(raw, backend, "c")["st"] == "blocked"
    # b keeps its place in line, ahead of a job published after it.
    b = claim(backend, max_jobs=1).claims[0]
    assert b.job_id == "b"
    assert ids(claim(backend, max_jobs=1)) == ["later"]
    backend.settle([Settle("b", b.token, "reject")])  # a dead letter frees the slot too
    assert job(raw, backend, "c")["st"] == "enqueued"
    assert ids(claim(backend)) == ["c"]
    assert not raw.sismember(backend.key("blkgroups"), "g")


def test_every_exit_of_a_claim_frees_its_slot(make_backend, raw):
    backend = make_backend(lease_ms=150)
    exits: list[Callable[[str, int], Any]] = [
        lambda i, t: backend.settle([Settle(i, t, "ack")]),
        lambda i, t: backend.settle([Settle(i, t, "fail", {"reason": "task failed"})]),
        lambda i, t: backend.settle([Settle(i, t, "requeue")]),
        lambda i, t: backend.settle([Settle(i, t, "release")]),
        lambda i, t: wait_until(lambda: backend.recover(), message="recovery"),
    ]
    for n, leave in enumerate(exits):
        group = f"g{n}"
        publish(backend, f"{group}-a", concurrency_group=group, concurrency_limit=1)
        got = claim(backend, max_jobs=1).claims[0]
        assert raw.smembers(backend.key("slot", group)) == {got.job_id}
        leave(got.job_id, got.token)
        assert raw.scard(backend.key("slot", group)) == 0, n
        if job(raw, backend, got.job_id)["st"] == "enqueued":
            claimed = claim(backend, max_jobs=1).claims[0]
            backend.settle([Settle(claimed.job_id, claimed.token, "ack")])


# -- leases -----------------------------------------------------------------------------


def test_heartbeat_renews_only_current_claims(make_backend, raw):
    short = make_backend(lease_ms=5_000)
    for name in ("a", "b", "c"):
        publish(short, name)
    claims = {c.job_id: c for c in claim(short).claims}
    short.settle([Settle("b", claims["b"].token, "ack")])
    before = raw.zscore(short.key("lease"), "a")
    renewer = make_backend(lease_ms=600_000)
    lost = renewer.heartbeat([("a", claims["a"].token), ("b", claims["b"].token),
                              ("c", claims["c"].token + 1), ("nope", 1)])
    assert sorted(lost) == ["b", "c", "nope"]
    after = raw.zscore(short.key("lease"), "a")
    assert after is not None and before is not None and after >= before + 590_000
    assert raw.zscore(short.key("lease"), "c") < before + 10_000
    assert raw.zscore(short.key("lease"), "b") is None
    assert raw.zscore(short.key("lease"), "nope") is None
    assert renewer.heartbeat([]) == []


def test_recover_requeues_expired_lease_by_stored_deadline(make_backend, raw):
    short = make_backend(lease_ms=200)
    long = make_backend(lease_ms=600_000)
    publish(short, "short")
    publish(short, "long")
    assert ids(claim(short, max_jobs=1, worker="dead-worker")) == ["short"]
    assert ids(claim(long, max_jobs=1, worker="live-worker")) == ["long"]
    # A recovering worker with long leases still recovers by the stored deadline...
    recovered = wait_until(lambda: long.recover(), message="expired lease recovered")
    assert [(r.job_id, r.outcome) for r in recovered] == [("short", "requeued")]
    record = job(raw, short, "short")
    assert record["st"] == "enqueued"
    hist = json.loads(record["hist"])
    assert hist[-1]["outcome"] == "lease expired" and hist[-1]["worker"] == "dead-worker"
    assert int(raw.hget(short.key("stats"), "recovered") or 0) == 1
    # ...and one with short leases never recovers a claim whose stored deadline is far.
    assert short.recover() == []
    assert job(raw, short, "long")["st"] == "running"
    again = claim(long).claims[0]
    assert again.job_id == "short" and again.deliveries == 2 and again.token == 2
    # The dead worker's late ack is fenced out.
    short.settle([Settle("short", 1, "ack")])
    assert job(raw, short, "short")["st"] == "running"


def test_recover_dead_letters_at_delivery_limit(make_backend, raw):
    backend = make_backend(lease_ms=150)
    publish(backend, "a", unique_lock="L", unique_window="running", max_deliveries=2)
    assert claim(backend).claims[0].deliveries == 1
    out = wait_until(lambda: backend.recover(), message="first recovery")
    assert [(r.job_id, r.outcome) for r in out] == [("a", "requeued")]
    assert claim(backend).claims[0].deliveries == 2
    out = wait_until(lambda: backend.recover(), message="second recovery")
    assert [(r.job_id, r.outcome) for r in out] == [("a", "dead")]
    record = job(raw, backend, "a")
    assert record["st"] == "failed" and record["reason"] == "delivery limit"
    assert "2 times" in record["emsg"]
    assert record["msg"] == "msg-a"
    assert raw.zscore(backend.key("dead"), "a") is not None
    assert raw.zscore(backend.key("lease"), "a") is None
    assert holder(raw, backend, "L") is None
    assert ids(claim(backend)) == []


def test_requeue_dead_letters_at_delivery_limit(backend, raw):
    publish(backend, "a", max_deliveries=1)
    tok = claim(backend).claims[0].token
    assert backend.settle([Settle("a", tok, "requeue")]) == [("a", "delivery limit")]
    assert job(raw, backend, "a")["st"] == "failed"


def test_reject_dead_letters_with_details(backend, raw):
    publish(backend, "a", "the message", unique_lock="L", unique_window="running")
    publish(backend, "b")
    claims = {c.job_id: c for c in claim(backend).claims}
    detail = {"exc_type": "ValueError", "exc_message": "bad input", "traceback": "Traceback..."}
    dead = backend.settle([Settle("a", claims["a"].token, "reject", detail),
                           Settle("b", claims["b"].token, "fail",
                                  {"reason": "task failed", "exc_type": "KeyError"})])
    assert dead == [("a", "rejected"), ("b", "task failed")]
    record = job(raw, backend, "a")
    assert record["st"] == "failed" and record["reason"] == "rejected"
    assert record["etype"] == "ValueError" and record["emsg"] == "bad input"
    assert record["tb"] == "Traceback..."
    assert record["msg"] == "the message"
    assert int(record["fin"]) > 0
    hist = json.loads(record["hist"])
    assert hist[-1]["outcome"] == "rejected" and hist[-1]["exc_type"] == "ValueError"
    assert hist[-1]["delivery"] == 1 and hist[-1]["worker"] == "w1"
    assert set(raw.zrange(backend.key("dead"), 0, -1)) == {"a", "b"}
    assert holder(raw, backend, "L") is None
    assert raw.zscore(backend.key("lease"), "a") is None
    assert job(raw, backend, "b")["reason"] == "task failed"
    assert int(raw.hget(backend.key("stats"), "dead_lettered") or 0) == 2


def test_release_does_not_count_a_delivery(backend, raw):
    publish(backend, "a", max_deliveries=1)
    for _ in range(3):
        got = claim(backend).claims[0]
        assert got.deliveries == 1
        assert backend.settle([Settle("a", got.token, "release")]) == []
        record = job(raw, backend, "a")
        assert record["st"] == "enqueued" and record["dl"] == "0"
    # A counted requeue at the limit dead-letters.
    got = claim(backend).claims[0]
    assert backend.settle([Settle("a", got.token, "requeue")]) == [("a", "delivery limit")]


# -- scheduling -------------------------------------------------------------------------


def test_eta_job_scheduled_until_due_then_claimable(backend, raw):
    due = redis_now_ms(raw) + 1_500
    out = publish(backend, "later", eta_ms=due)
    assert out.accepted and out.state == "scheduled"
    publish(backend, "now")
    assert job(raw, backend, "later")["st"] == "scheduled"
    assert raw.zscore(backend.key("sched"), "later") == due
    assert ids(claim(backend)) == ["now"]
    assert ids(claim(backend)) == []
    got = wait_until(lambda: ids(claim(backend)), message="due job claimable")
    assert got == ["later"]
    record = job(raw, backend, "later")
    assert int(record["start"]) >= due
    assert raw.zscore(backend.key("sched"), "later") is None
    # An eta in the past is enqueued at once.
    out = publish(backend, "past", eta_ms=redis_now_ms(raw) - 1000)
    assert out.state == "enqueued"


def test_maintain_promotes_due_scheduled_jobs(backend, raw):
    publish(backend, "a", eta_ms=redis_now_ms(raw) + 300)
    wait_until(lambda: backend.maintain("w") and job(raw, backend, "a")["st"] == "enqueued",
               message="promotion")
    assert raw.zrange(backend.key("q", Q), 0, -1) == ["a"]


def test_maintain_is_throttled_across_workers(make_backend):
    one = make_backend(maintenance_interval_ms=60_000)
    two = make_backend(maintenance_interval_ms=60_000)
    assert one.maintain("w1") is True
    assert two.maintain("w2") is False
    assert one.maintain("w1") is False


def test_maintain_prunes_completed_past_retention(make_backend, raw):
    backend = make_backend(retention=(2_000, 100_000, 600_000, 100_000))
    for name in ("a", "b", "dead"):
        publish(backend, name)
    claims = {c.job_id: c for c in claim(backend).claims}
    backend.settle([Settle("a", claims["a"].token, "ack"), Settle("b", claims["b"].token, "ack"),
                    Settle("dead", claims["dead"].token, "fail", {"reason": "task failed"})])
    maintain(backend)
    assert job(raw, backend, "a") != {}, "pruned before its retention"
    wait_until(lambda: backend.maintain("w") and raw.zcard(backend.key("done")) == 0,
               message="completed pruned")
    assert job(raw, backend, "a") == {} and job(raw, backend, "b") == {}
    assert job(raw, backend, "dead")["st"] == "failed", "dead letter pruned by completed retention"
    # Count bound: only the newest N completed records are kept.
    counted = make_backend(retention=(600_000, 2, 600_000, 1))
    for i in range(4):
        publish(counted, f"c{i}")
        got = claim(counted).claims[0]
        counted.settle([Settle(got.job_id, got.token, "ack")])
    publish(counted, "dead2")
    got = claim(counted).claims[0]
    counted.settle([Settle("dead2", got.token, "reject")])
    maintain(counted)
    assert raw.zrange(counted.key("done"), 0, -1) == ["c2", "c3"]
    assert job(raw, counted, "c0") == {} and job(raw, counted, "c1") == {}
    assert job(raw, counted, "c3")["st"] == "completed"
    assert raw.zrange(counted.key("dead"), 0, -1) == ["dead2"]
    assert job(raw, counted, "dead") == {}


def test_maintain_unblocks_groups_with_free_slots(backend, raw):
    for name in ("a", "b", "c"):
        publish(backend, name, concurrency_group="g", concurrency_limit=1)
    a = claim(backend).claims[0]
    assert job(raw, backend, "b")["st"] == "blocked"
    # While the group is full, maintenance leaves the parked jobs alone.
    maintain(backend)
    assert job(raw, backend, "b")["st"] == "blocked"
    # The slot entry goes stale (its job left running without settling through the store,
    # e.g. an operator edit): maintenance drops it and unblocks one job per free slot.
    raw.hset(backend.key("job", "a"), "st", "canceled")
    maintain(backend)
    assert raw.smembers(backend.key("slot", "g")) == set()
    assert job(raw, backend, "b")["st"] == "enqueued"
    assert job(raw, backend, "c")["st"] == "blocked"
    assert backend.settle([Settle("a", a.token, "ack")]) == []
    assert ids(claim(backend)) == ["b"]
    assert job(raw, backend, "c")["st"] == "blocked"
