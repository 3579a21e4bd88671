"""Defect 3 of issue 12: canvas whose members have extension options completes, with
correct results, on every store (real workers).

A coalesced member keeps its own id; a follower published under it completes from the
holder's outcome, so group results, chord parts, chain steps and callbacks all arrive
(``celery_plus/send/follow.py``, docs/options.md "Canvas").
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import pairwise
from typing import Any

import pytest
from celery import chain, chord, group

from celery_plus.model.store import Backend
from tests.inspectors import inspector_for

from . import dropin_fixtures
from .conftest import Worker, wait_until
from .proj import events

APP = dropin_fixtures.APP
client = dropin_fixtures.client  # the drop-in project's client app

TIMEOUT = 60



@pytest.fixture
def worker(start_worker: Callable[..., Worker]) -> Worker:
    return start_worker(app=APP, pool="threads", concurrency=4)


def _ran(prefix: str, kind: str, n: int) -> int:
    return sum(1 for e in events(prefix, kind) if e["n"] == n)


def test_a_group_of_duplicates_runs_once_and_every_member_gets_the_result(
        client: Any, worker: Worker, prefix: str) -> None:
    uniq = client.tasks["dropin.uniq"]
    result = group(uniq.s(1), uniq.s(1)).apply_async()
    assert result.get(timeout=TIMEOUT) == [10, 10]
    assert _ran(prefix, "uniq", 1) == 1


def test_a_chord_of_duplicates_completes_with_the_sum(
        client: Any, worker: Worker, prefix: str) -> None:
    uniq, tsum = client.tasks["dropin.uniq"], client.tasks["proj.tsum"]
    result = chord([uniq.s(2), uniq.s(2)])(tsum.s())
    assert result.get(timeout=TIMEOUT) == 40
    assert _ran(prefix, "uniq", 2) == 1


def test_a_chain_whose_first_step_is_pending_elsewhere_follows_it(
        client: Any, worker: Worker, prefix: str) -> None:
    uniq, add = client.tasks["dropin.uniq"], client.tasks["proj.add"]
    holder = uniq.apply_async((3,), countdown=2)  # pending when the chain is published
    result = chain(uniq.s(3), add.s(1)).apply_async()
    assert result.get(timeout=TIMEOUT) == 31
    assert result.parent.get(timeout=TIMEOUT) == 30 and result.parent.id != holder.id
    assert holder.get(timeout=TIMEOUT) == 30
    assert _ran(prefix, "uniq", 3) == 1


def test_a_followed_failure_fails_the_member_and_runs_its_errback(
        client: Any, worker: Worker, prefix: str, view: Backend) -> None:
    failing, add, mark = (client.tasks[n] for n in ("dropin.uniq_fail", "proj.add", "proj.mark"))
    holder = failing.delay(4)
    member = failing.s(4).set(link_error=mark.si(404))
    result = chain(member, add.s(1)).apply_async()
    with pytest.raises(ValueError, match="uniq_fail 4"):
        result.get(timeout=TIMEOUT)
    assert result.parent.state == "FAILURE" and holder.state == "FAILURE"
    wait_until(lambda: [e for e in events(prefix, "mark") if e["n"] == 404],
               timeout=TIMEOUT, message="the member's errback ran")
    assert _ran(prefix, "uniq_fail", 4) == 1
    wait_until(lambda: (inspector_for(view).job(result.parent.id) or {}).get("st") == "failed",
               timeout=TIMEOUT, message="the follower's failure dead-lettered")


def test_concurrency_limited_members_of_a_chord_complete_one_at_a_time(
        client: Any, worker: Worker, prefix: str) -> None:
    limited, tsum = client.tasks["dropin.limited"], client.tasks["proj.tsum"]
    result = chord([limited.s(n, 0.3) for n in range(1, 5)])(tsum.s())
    assert result.get(timeout=TIMEOUT) == 10
    runs = sorted((e["t"], e["n"]) for e in events(prefix, "limited"))
    assert sorted(n for _, n in runs) == [1, 2, 3, 4]
    starts = [t for t, _ in runs]
    # concurrency=1: each starts at least the task's duration after the previous one.
    assert all(b - a >= 0.25 for a, b in pairwise(starts)), runs


def test_members_following_a_cancelled_holder_fail_as_revoked(
        client: Any, worker: Worker, prefix: str) -> None:
    from celery.exceptions import TaskRevokedError

    from celery_plus import admin

    uniq = client.tasks["dropin.uniq"]
    holder = uniq.apply_async((5,), countdown=60)
    result = group(uniq.s(5), uniq.s(5)).apply_async()
    assert admin.cancel(client, holder.id).changed
    with pytest.raises(TaskRevokedError):
        result.get(timeout=TIMEOUT)
    assert [r.state for r in result.results] == ["FAILURE", "FAILURE"]
    assert _ran(prefix, "uniq", 5) == 0


def test_a_plain_duplicate_still_returns_the_holder(
        client: Any, worker: Worker, prefix: str) -> None:
    uniq = client.tasks["dropin.uniq"]
    first = uniq.delay(6)
    again = uniq.delay(6)
    assert again.deduplicated and again.id == first.id
    explicit = uniq.apply_async((6,), task_id=f"{prefix}-explicit-6")
    assert explicit.deduplicated and explicit.id == first.id
    assert first.get(timeout=TIMEOUT) == 60


def test_the_last_step_of_a_chain_follows_its_holder(
        client: Any, worker: Worker, prefix: str) -> None:
    uniq, add = client.tasks["dropin.uniq"], client.tasks["proj.add"]
    holder = uniq.apply_async((8,), countdown=2)
    result = chain(add.si(1, 1), uniq.si(8))()  # uniq(8) is published by the worker
    assert result.get(timeout=TIMEOUT) == 80 and result.id != holder.id
    assert _ran(prefix, "uniq", 8) == 1


def test_a_member_published_in_a_batch_follows_its_holder(
        client: Any, worker: Worker, prefix: str) -> None:
    uniq = client.tasks["dropin.uniq"]
    with client.publish_batch():
        first = uniq.delay(7)
        members = group(uniq.s(7), uniq.s(7)).apply_async()
    assert first.deduplicated is False
    assert members.get(timeout=TIMEOUT) == [70, 70] and first.get(timeout=TIMEOUT) == 70
    assert _ran(prefix, "uniq", 7) == 1


def test_the_follow_task_is_internal_like_celerys_own(client: Any, worker: Worker) -> None:
    """docs/options.md: ``celery.plus_follow`` is absent from ``inspect registered`` and
    the worker banner, as Celery's own ``celery.*`` tasks are."""
    replies = client.control.inspect(timeout=5).registered() or {}
    names = [name for reply in replies.values() for name in reply]
    assert "dropin.uniq" in names and "celery.plus_follow" not in names, replies
    banner = worker.log().partition("[tasks]")[2]
    assert "dropin.uniq" in banner and "plus_follow" not in banner, worker.log()


def test_a_member_keeps_its_id_and_names_its_holder(
        client: Any, worker: Worker, prefix: str) -> None:
    uniq, mark = client.tasks["dropin.uniq"], client.tasks["proj.mark"]
    holder = uniq.apply_async((9,), countdown=1)
    member = uniq.s(9).set(link=mark.si(909)).apply_async()
    assert (member.deduplicated, member.holder_id) == (True, holder.id)
    assert member.id != holder.id and member.get(timeout=TIMEOUT) == 90
    wait_until(lambda: [e for e in events(prefix, "mark") if e["n"] == 909],
               timeout=TIMEOUT, message="the member's callback ran")
    assert _ran(prefix, "uniq", 9) == 1


def test_a_member_of_a_holder_that_stores_no_result_fails_saying_so(
        client: Any, worker: Worker, prefix: str, view: Backend) -> None:
    """The member carries the holder task's ``ignore_result`` (its ``.get()`` returns None, as
    Celery's does for such a task), so the follower's failure shows as its errback and its
    dead letter."""
    inspect = inspector_for(view)
    quiet, mark = client.tasks["dropin.uniq_quiet"], client.tasks["proj.mark"]
    quiet.apply_async((1,), countdown=1)
    member = quiet.s(1).set(link_error=mark.si(1001)).apply_async()
    assert member.deduplicated
    wait_until(lambda: [e for e in events(prefix, "mark") if e["n"] == 1001],
               timeout=TIMEOUT, message="the member's errback ran")
    wait_until(lambda: (inspect.job(member.id) or {}).get("st") == "failed",
               timeout=TIMEOUT, message="the follower's failure dead-lettered")
    assert "FollowError" in str(inspect.job(member.id)), inspect.job(member.id)
    assert "stored no result" in str(inspect.job(member.id)), inspect.job(member.id)
    assert _ran(prefix, "uniq_quiet", 1) == 1


def test_a_member_following_a_holder_on_rpc_fails_saying_why(
        prefix: str, broker_url: str, start_worker: Callable[..., Worker]) -> None:
    """With ``result_backend='rpc://'`` a result reaches only the client that published its
    task, so a follower cannot read its holder's: it fails at once, naming ``rpc://``
    (docs/options.md, "Canvas"), instead of waiting for the holder and then blaming
    ``ignore_result``. Members that coalesce with nothing complete as on plain Celery."""
    from celery.exceptions import TimeoutError as CeleryTimeoutError

    from celery_plus.send.follow import FollowError

    from . import dropin_proj

    start_worker(app=APP, pool="threads", concurrency=4,
                 env={"PLUS_TEST_RESULT_BACKEND": "rpc://"})
    rpc, other = (dropin_proj.make_app(prefix, result_backend="rpc://") for _ in range(2))
    try:
        uniq, add = rpc.tasks["dropin.uniq"], rpc.tasks["proj.add"]
        assert chain(uniq.s(9, 0), add.s(1)).apply_async().get(timeout=TIMEOUT) == 91
        with pytest.raises(NotImplementedError, match="rpc"):  # as on plain Celery
            chord([add.s(1, 1)])(rpc.tasks["proj.tsum"].s())
        holder = uniq.apply_async((10,), countdown=5)  # pending: the member coalesces
        member = chain(uniq.s(10), add.s(1)).apply_async()
        with pytest.raises(FollowError, match=r"rpc://.*only to the client"):
            member.get(timeout=TIMEOUT)
        # A plain duplicate from another client gets the holder's id, whose result goes
        # to the holder's client only.
        again = other.tasks["dropin.uniq"].delay(10)
        assert again.deduplicated and again.id == holder.id
        assert holder.get(timeout=TIMEOUT) == 100
        with pytest.raises(CeleryTimeoutError):
            again.get(timeout=3)
        assert _ran(prefix, "uniq", 10) == 1
    finally:
        rpc.close()
        other.close()
