"""Conformance: holds taken under the seed's key format end like any other (issue #15).

Whole-payload unique keys were ``args:<FNV-1a 64, 16 hex digits>`` and are now
``args:<BLAKE2b-128, 32 hex digits>``. A job published before the change keeps its old key in
its record, and no store ever recomputes a key: every release (ack, dead letter, admin cancel),
every renewal and the admin's retry read the key from the stored record, and a TTL hold lapses at
its TTL. Until such a hold ends, a publish of the same arguments by the new version carries the
new key and is therefore not coalesced into the old holder (docs/options.md).
"""

from __future__ import annotations

import pytest

from celery_plus.admin import Admin, admin_for
from celery_plus.model.store import Backend, Settle
from celery_plus.send.keys import unique_key
from tests.inspectors import Inspector

from .support import claim, publish, record, wait_until
from .test_admin import dead, job

TASK = "proj.work"
#: The seed's FNV-1a 64 key of ``{"invoice_id": 42}`` (seed §2.3 vector), as the previous
#: version stored it.
OLD = f"{TASK}:args:7da48402686dbde6"
#: The key this version computes for the same arguments.
NEW = f"{TASK}:{unique_key({'invoice_id': 42}, None)}"
RUNNING = {"unique_window": "running"}


def test_the_two_formats_differ_for_the_same_arguments() -> None:
    assert OLD != NEW and len(OLD) < len(NEW)


def _end(backend: Backend, how: str) -> None:
    """End job ``old`` (waiting) by ``how``: a worker's settle, or an admin cancel."""
    if how == "cancel":
        assert Admin(admin_for(backend)).cancel("old").changed
        return
    got = claim(backend).claims
    assert [c.job_id for c in got] == ["old"]
    backend.settle([Settle("old", got[0].token, how)])


@pytest.mark.parametrize(("how", "state"), [("ack", "completed"), ("fail", "failed"),
                                            ("reject", "failed"), ("cancel", "canceled")])
def test_an_old_format_hold_is_released_when_its_job_ends(
        backend: Backend, inspect: Inspector, how: str, state: str) -> None:
    job(backend, "old", TASK, kwargs={"invoice_id": 42}, unique_lock=OLD,
        unique_window="running")
    assert inspect.holder(OLD) == "old"
    _end(backend, how)
    assert record(backend, "old").state == state
    assert inspect.holds() == {}, "the old key outlived its job"
    out = publish(backend, "new", unique_lock=NEW, **RUNNING)
    assert out.accepted and inspect.holds() == {NEW: "new"}
    assert not publish(backend, "dup", unique_lock=NEW, **RUNNING).accepted


def test_a_new_format_duplicate_is_not_coalesced_into_an_old_hold(backend: Backend,
                                                                  inspect: Inspector) -> None:
    publish(backend, "old", unique_lock=OLD, **RUNNING)
    out = publish(backend, "new", unique_lock=NEW, **RUNNING)
    assert out.accepted, "another key: the old holder cannot coalesce it"
    assert inspect.holds() == {OLD: "old", NEW: "new"}
    assert publish(backend, "again", unique_lock=NEW, **RUNNING).holder_id == "new"


def test_an_old_format_ttl_hold_outlives_its_job_and_lapses_at_its_ttl(backend: Backend,
                                                                       inspect: Inspector) -> None:
    publish(backend, "old", unique_lock=OLD, unique_window="ttl", unique_ttl_ms=500)
    got = claim(backend).claims[0]
    backend.settle([Settle("old", got.token, "ack")])
    assert inspect.holder(OLD) == "old", "a ttl hold was released early"
    wait_until(lambda: inspect.holder(OLD) is None, timeout=10, message="the ttl lapses")
    assert publish(backend, "next", unique_lock=OLD, unique_window="ttl",
                   unique_ttl_ms=500).accepted


def test_an_admin_retry_takes_the_stored_old_key_again(backend: Backend,
                                                       inspect: Inspector) -> None:
    dead(backend, "old", TASK, unique_lock=OLD, unique_window="running")
    assert inspect.holds() == {}
    assert Admin(admin_for(backend)).retry("old").changed
    assert inspect.holds() == {OLD: "old"}
    got = claim(backend).claims[0]
    backend.settle([Settle("old", got.token, "ack")])
    assert inspect.holds() == {}


def test_a_retry_published_by_the_new_version_moves_the_job_to_the_new_key(
        backend: Backend, inspect: Inspector) -> None:
    publish(backend, "old", unique_lock=OLD, **RUNNING)
    got = claim(backend).claims[0]
    out = publish(backend, "old", "retried", unique_lock=NEW, lease_token=got.token, **RUNNING)
    assert out.continued
    assert inspect.holds() == {NEW: "old"}
