"""Conformance: holds live as long as their job needs them; a key is one opaque string
(DESIGN §3.3; issue #11 defects 6, 7, 14).

Rules: a message with another unique key than its job's (``Task.replace``, a retry with other
arguments, a replacement of a waiting job) releases the job's old key once the new one is
decided; a TTL key is never released early. A non-TTL hold is taken until the job's due time
plus the backstop, and maintenance renews it while the job waits or runs (a coordination store
renews running jobs' holds only); a hold no job needs any more lapses at its deadline. A key,
a concurrency group and a task name are each one opaque string, whatever characters they hold
(every separator the scripts use, multi-field ``unique_by`` keys, 1 MB).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from celery_plus.model.store import Backend, Settle
from celery_plus.send.keys import concurrency_scope, unique_key
from tests.inspectors import Inspector, inspector_for

from .support import claim, ids, maintain, publish, record, wait_until

RUNNING = {"unique_window": "running"}


# -- defect 6: a continuation or replacement with another key -----------------------------
@pytest.mark.parametrize("window", ["running", "pending"])
def test_a_continuation_with_another_key_releases_the_old_key(
        backend: Backend, inspect: Inspector, window: str) -> None:
    publish(backend, "a", unique_lock="old", unique_window=window)
    got = claim(backend).claims[0]
    out = publish(backend, "a", "replaced", unique_lock="new", unique_window=window,
                  lease_token=got.token)
    assert out.accepted and out.continued
    assert inspect.holder("old") is None, "the old key stays held by a job that left it"
    assert inspect.holder("new") == "a"
    assert publish(backend, "b", unique_lock="old", unique_window=window).accepted
    assert inspect.holder("old") == "b"
    a = claim(backend, max_jobs=1).claims[0]
    assert a.job_id == "a"
    backend.settle([Settle("a", a.token, "ack")])
    assert inspect.holder("new") is None and inspect.holder("old") == "b"


def test_a_continuation_without_a_key_releases_the_old_key(backend: Backend,
                                                           inspect: Inspector) -> None:
    publish(backend, "a", unique_lock="old", **RUNNING)
    got = claim(backend).claims[0]
    assert publish(backend, "a", "plain", lease_token=got.token).continued
    assert inspect.holds() == {}


def test_a_continuation_into_a_taken_key_releases_its_own_key(backend: Backend,
                                                              inspect: Inspector) -> None:
    publish(backend, "a", unique_lock="old", **RUNNING)
    got = claim(backend).claims[0]
    publish(backend, "b", unique_lock="new", **RUNNING)
    out = publish(backend, "a", unique_lock="new", lease_token=got.token, **RUNNING)
    assert not out.accepted and out.holder_id == "b"
    assert record(backend, "a").state == "completed"
    assert inspect.holds() == {"new": "b"}


def test_a_replacement_of_a_waiting_job_with_another_key_releases_the_old_key(
        backend: Backend, inspect: Inspector) -> None:
    publish(backend, "a", unique_lock="old", **RUNNING)
    assert publish(backend, "a", unique_lock="new", **RUNNING).accepted
    assert inspect.holds() == {"new": "a"}
    # A duplicate of the new key leaves the job, and its key, where they were.
    publish(backend, "b", unique_lock="other", **RUNNING)
    assert not publish(backend, "b", unique_lock="new", **RUNNING).accepted
    assert inspect.holds() == {"new": "a", "other": "b"}


def test_a_ttl_key_is_kept_when_the_job_takes_another_key(backend: Backend,
                                                          inspect: Inspector) -> None:
    publish(backend, "a", unique_lock="ttl", unique_window="ttl", unique_ttl_ms=600_000)
    got = claim(backend).claims[0]
    assert publish(backend, "a", unique_lock="new", lease_token=got.token, **RUNNING).continued
    assert inspect.holds() == {"ttl": "a", "new": "a"}


# -- defect 7: holds live as long as their job needs them ---------------------------------
def test_a_scheduled_job_holds_its_key_until_its_due_time_plus_the_backstop(
        make_backend: Callable[..., Backend]) -> None:
    backend = make_backend(backstop_ms=60_000)
    due = backend.now_ms() + 600_000
    publish(backend, "a", eta_ms=due, unique_lock="K", **RUNNING)
    deadline = inspector_for(backend).hold_deadline("K")
    assert deadline is not None and due + 60_000 <= deadline <= due + 61_000


def _past(backend: Backend, when: int) -> None:
    wait_until(lambda: backend.now_ms() > when, timeout=10, message="the store's clock")


@pytest.mark.parametrize("state", ["enqueued", "blocked", "running"])
def test_maintenance_renews_the_hold_of_a_job_that_still_needs_it(
        make_backend: Callable[..., Backend], state: str) -> None:
    backend = make_backend(backstop_ms=800)
    extra: dict[str, Any] = {}
    if state in ("blocked", "running"):
        extra.update(concurrency_group="g", concurrency_limit=1)
    if state == "blocked":
        publish(backend, "first", concurrency_group="g", concurrency_limit=1)
    publish(backend, "a", unique_lock="K", unique_window="running", **extra)
    if state in ("blocked", "running"):
        claim(backend)
    assert record(backend, "a").state == state
    first = inspector_for(backend).hold_deadline("K")
    assert first is not None
    # Past its first deadline the job still holds its key: maintenance renewed it.
    while backend.now_ms() <= first + 100:
        maintain(backend)
    assert inspector_for(backend).holder("K") == "a", state
    assert not publish(backend, "dup", unique_lock="K", **RUNNING).accepted
    assert (inspector_for(backend).hold_deadline("K") or 0) > first


def test_maintenance_renews_a_pending_hold_while_its_job_waits(
        make_backend: Callable[..., Backend]) -> None:
    backend = make_backend(backstop_ms=800)
    publish(backend, "a", unique_lock="P", unique_window="pending")
    first = inspector_for(backend).hold_deadline("P") or 0
    while backend.now_ms() <= first + 100:
        maintain(backend)
    assert inspector_for(backend).holder("P") == "a"
    assert ids(claim(backend)) == ["a"] and inspector_for(backend).holder("P") is None


def test_a_hold_no_job_needs_lapses_at_its_deadline(
        make_backend: Callable[..., Backend]) -> None:
    backend = make_backend(backstop_ms=800)
    inspect = inspector_for(backend)
    publish(backend, "a", unique_lock="K", **RUNNING)
    first = inspect.hold_deadline("K") or 0
    inspect.force_state("a", "completed")  # a finished job whose hold was left behind
    while backend.now_ms() <= first + 100:
        maintain(backend)
    assert inspect.holder("K") is None


def test_a_coordination_store_renews_only_the_holds_of_running_jobs(
        make_backend: Callable[..., Backend]) -> None:
    backend = make_backend(backstop_ms=800)
    inspect = inspector_for(backend)
    backend.renews_waiting_holds = False  # type: ignore[attr-defined]
    publish(backend, "waiting", unique_lock="W", **RUNNING)
    publish(backend, "running", unique_lock="R", queue="other", **RUNNING)
    claim(backend, queues=["other"])
    first = max(inspect.hold_deadline("W") or 0, inspect.hold_deadline("R") or 0)
    while backend.now_ms() <= first + 100:
        maintain(backend)
    assert inspect.holder("R") == "running"
    assert inspect.holder("W") is None


# -- defect 14: a key is one opaque string -------------------------------------------------
ODD = ["a\x1fb", "\x06\x16", "x:y:z", "{tag}", "}{", "with spaces ", "é\u2028\U0001f600", ""]


def _keys(kind: str) -> list[str]:
    keys = [f"t:{unique_key({'a': v, 'b': 2}, ['a', 'b'])}" for v in ODD]
    keys += [f"t:{unique_key({'a': v, 'b': [v], 'c': {'k': v}}, ['a', 'b', 'c'])}" for v in ODD]
    keys += ["t:" + unique_key({"a": "x\udc80y", "b": "\ud800"}, ["a", "b"])]  # lone surrogates
    keys += [f"t:{concurrency_scope({'c': v}, 'c')}" for v in ODD]
    keys += ["raw\x1fkey\x1fthree", "raw\x06\x16sep", "raw:{}", "x" * 1_000_000,
             "t:" + unique_key({"a": "é" * 500_000, "b": 1}, ["a", "b"])]
    if kind != "postgres":  # PostgreSQL text cannot hold NUL (keys from arguments never do)
        keys.append("nul\x00inside")
    return keys


def test_a_unique_key_is_one_opaque_string_whatever_it_holds(
        backend: Backend, inspect: Inspector, backend_kind: str) -> None:
    keys = _keys(backend_kind)
    assert len(set(keys)) == len(keys)
    for n, key in enumerate(keys):
        out = publish(backend, f"j{n}", unique_lock=key, **RUNNING)
        assert out.accepted, (n, key[:40])
        assert inspect.holder(key) == f"j{n}", (n, key[:40])
        dup = publish(backend, f"dup{n}", unique_lock=key, **RUNNING)
        assert not dup.accepted and dup.holder_id == f"j{n}", (n, key[:40])
    claims = claim(backend, max_jobs=len(keys)).claims
    assert len(claims) == len(keys)
    backend.settle([Settle(c.job_id, c.token, "ack") for c in claims])
    assert inspect.holds() == {}
    for n, key in enumerate(keys):
        assert publish(backend, f"again{n}", unique_lock=key, **RUNNING).accepted


def test_a_concurrency_group_and_a_task_name_are_opaque_strings(
        backend: Backend, inspect: Inspector, backend_kind: str) -> None:
    groups = _keys(backend_kind)
    for n, group in enumerate(groups):
        publish(backend, f"a{n}", name=group[:1000], concurrency_group=group,
                concurrency_limit=1)
        publish(backend, f"b{n}", concurrency_group=group, concurrency_limit=1)
    first = claim(backend, max_jobs=2 * len(groups))
    assert sorted(ids(first)) == sorted(f"a{n}" for n in range(len(groups)))
    assert sorted(first.blocked) == sorted(f"b{n}" for n in range(len(groups)))
    for n, group in enumerate(groups):
        assert inspect.slot_holders(group) == {f"a{n}"}, n
        assert record(backend, f"a{n}").name == group[:1000], n
    backend.settle([Settle(c.job_id, c.token, "ack") for c in first.claims])
    second = claim(backend, max_jobs=2 * len(groups))
    assert sorted(ids(second)) == sorted(f"b{n}" for n in range(len(groups)))
