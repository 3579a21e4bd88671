"""Conformance: claiming and priority (DESIGN §3.2 job records, priorities; §1.5 raw bytes).

Rules: a message is delivered byte for byte as published (also when it is not UTF-8); a claim
makes the job running with a new lease token, the worker and a counted delivery; claims follow
priority (lower first) then FIFO; one claim takes at most ``max_jobs``; queues are scanned in
the order given.
"""

from __future__ import annotations

import json

import pytest

from celery_plus.model.store import Backend
from tests.inspectors import Inspector

from .support import Q, claim, ids, publish, record


def test_a_claim_delivers_the_message_byte_for_byte(backend: Backend) -> None:
    message = json.dumps({"body": "e30=", "headers": {"task": "t", "note": "héllo ✓ \u0000"},
                          "properties": {"x": [1, 2.5, None]}}, ensure_ascii=False)
    out = publish(backend, "a", message, name="t")
    assert out.accepted and out.state == "enqueued" and not out.continued
    assert backend.raw_message("a") == message.encode()
    (got,) = claim(backend).claims
    assert got.message == message.encode()
    assert record(backend, "a").message == message


def test_message_bytes_that_are_not_utf8_are_delivered_unchanged(backend: Backend) -> None:
    raw = b"\xff\xfe not json \x00 \xc3\x28"
    backend.push_raw(Q, "raw", raw)
    assert backend.raw_message("raw") == raw
    (got,) = claim(backend).claims
    assert got.job_id == "raw" and bytes(got.message) == raw
    assert "\ufffd" in record(backend, "raw").message, "job() decodes with replacement"


def test_a_claim_makes_the_job_running_with_a_new_token_and_a_counted_delivery(
        backend: Backend, inspect: Inspector) -> None:
    publish(backend, "a", name="t")
    (got,) = claim(backend, worker="w1").claims
    assert (got.job_id, got.token, got.deliveries, got.queue) == ("a", 1, 1, Q)
    rec = record(backend, "a")
    assert rec.state == "running" and rec.worker == "w1" and rec.name == "t"
    assert rec.lease_token == 1 and rec.deliveries == 1 and rec.started_ms > 0
    assert inspect.ids_in_state("running") == ["a"]
    assert inspect.lease_deadline("a") is not None
    assert ids(claim(backend)) == [], "a running job is claimed twice"


def test_claim_order_is_priority_then_fifo(backend: Backend) -> None:
    # Lower priority value first; equal priorities in publish order.
    for job_id, pri in [("p5a", 5), ("p0a", 0), ("p9", 9), ("p5b", 5), ("p0b", 0), ("p5c", 5)]:
        publish(backend, job_id, priority=pri)
    order = []
    for _ in range(6):
        order += ids(claim(backend, max_jobs=1))
    assert order == ["p0a", "p0b", "p5a", "p5b", "p5c", "p9"]
    assert ids(claim(backend)) == []


def test_one_claim_takes_at_most_max_jobs(backend: Backend) -> None:
    for i in range(7):
        publish(backend, f"j{i}")
    assert ids(claim(backend, max_jobs=3)) == ["j0", "j1", "j2"]
    assert ids(claim(backend, max_jobs=3)) == ["j3", "j4", "j5"]
    assert ids(claim(backend, max_jobs=3)) == ["j6"]
    assert ids(claim(backend, max_jobs=3)) == []
    assert backend.size(Q) == 0


@pytest.mark.cluster_smoke
def test_claims_of_several_queues_follow_the_given_queue_order(backend: Backend) -> None:
    publish(backend, "b1", queue="b")
    publish(backend, "a1", queue="a")
    publish(backend, "c1", queue="c")
    result = claim(backend, queues=("a", "b"))
    assert ids(result) == ["a1", "b1"]
    assert [c.queue for c in result.claims] == ["a", "b"]
    assert record(backend, "c1").state == "enqueued", "a queue not asked for was claimed"
