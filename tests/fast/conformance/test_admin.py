"""Conformance: the admin (DESIGN §4; issue 5 "API tests on every backend: each operation,
filters, paging, idempotency, and a race of two concurrent retries of one job that enqueues it
once").

Rules: counts per state; listings per state newest first, paged, filtered by task name, queue,
time range and text in the args or the error; ``show`` decodes the kombu envelope (protocol 2
body ``[args, kwargs, embed]``) and reports attempts, error history and traceback (a malformed
message: the raw bytes and why it cannot be decoded); ``retry`` (failed -> enqueued, same task
id, deliveries reset, history kept, unique hold taken again, a key held by another job is a
``RetryConflict`` naming it and changes nothing); ``discard`` (failed -> discarded, record
kept); ``cancel`` (enqueued | scheduled | blocked -> canceled, hold released, gone from its
queue, schedule or blocked set); bulk ``retry_many`` / ``purge`` scoped by task, queue, age,
unscoped only with ``all=True``; every operation idempotent (a repeat is a no-op that says
so) with one winner under races; maintenance prunes canceled and discarded records like
completed ones.

Runs on every backend (Redis, SQLite, PostgreSQL): each has an admin implementation, and a
backend without one fails here (``UnsupportedStore``) instead of being skipped.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from celery_plus.admin import (
    Admin,
    JobNotFound,
    RetryConflict,
    UnscopedOperation,
    admin_for,
)
from celery_plus.model.details import clean_text
from celery_plus.model.store import NOT_STARTED, Backend, Settle
from tests.inspectors import Inspector

from .support import Q, claim, history, ids, maintain, publish, record, wait_until

TRACEBACK = 'Traceback (most recent call last):\n  File "tasks.py", line 3\nValueError: boom'


def envelope(job_id: str, task: str, args: list[Any] | None = None,
             kwargs: dict[str, Any] | None = None) -> str:
    """A Celery protocol 2 message as kombu stores it (base64 JSON body)."""
    args, kwargs = args or [], kwargs or {}
    body = json.dumps([args, kwargs, {"callbacks": None, "errbacks": None, "chain": None,
                                      "chord": None}])
    return json.dumps({
        "body": base64.b64encode(body.encode()).decode(),
        "content-encoding": "utf-8", "content-type": "application/json",
        "headers": {"lang": "py", "task": task, "id": job_id, "retries": 0,
                    "argsrepr": repr(tuple(args)), "kwargsrepr": repr(kwargs)},
        "properties": {"correlation_id": job_id, "body_encoding": "base64", "priority": 0,
                       "delivery_info": {"exchange": "", "routing_key": Q}},
    })


def job(backend: Backend, job_id: str, task: str = "proj.work", args: list[Any] | None = None,
        kwargs: dict[str, Any] | None = None, **fields: Any) -> None:
    """Publish a job carrying a real Celery message."""
    out = publish(backend, job_id, envelope(job_id, task, args, kwargs), name=task, **fields)
    assert out.accepted, out


def dead(backend: Backend, job_id: str, task: str = "proj.work", queue: str = Q,
         error: str = "boom", **fields: Any) -> None:
    """Publish a job, claim it and settle it with a failure: a dead letter."""
    job(backend, job_id, task, queue=queue, **fields)
    got = claim(backend, max_jobs=1, queues=[queue]).claims
    assert [c.job_id for c in got] == [job_id], "the queue had other jobs ready"
    backend.settle([Settle(job_id, got[0].token, "fail", {
        "reason": "task failed", "exc_type": "ValueError", "exc_message": error,
        "traceback": TRACEBACK})])
    assert record(backend, job_id).state == "failed"


def midpoint_of_a_gap(backend: Backend, gap_ms: int = 400) -> int:
    """A store time with ``gap_ms / 2`` of nothing on either side (waits the gap out).

    An age cutoff the admin computes from its own clock lands at this mark plus the call's
    latency; the half gap absorbs that latency so the cutoff never overtakes what comes next.
    """
    start = backend.now_ms()
    wait_until(lambda: backend.now_ms() > start + gap_ms, timeout=5,
               message="the store clock moves")
    return start + gap_ms // 2


def later(backend: Backend) -> int:
    """A store time strictly after everything done so far (waits for the clock to move)."""
    mark = backend.now_ms() + 1
    wait_until(lambda: backend.now_ms() > mark, timeout=5, message="the store clock moves")
    return mark


@pytest.fixture
def admin(backend: Backend) -> Iterator[Admin]:
    yield Admin(admin_for(backend))


@pytest.fixture
def make_admin(make_backend: Callable[..., Backend], admin: Admin) -> Callable[[], Admin]:
    """Another admin on the test's store, with its own backend (connection)."""
    return lambda: Admin(admin_for(make_backend()))


def listed(admin: Admin, state: str, **filters: Any) -> list[str]:
    return [row.id for row in admin.jobs(state, per_page=1000, **filters).items]


# -- counts and listings -----------------------------------------------------------------
def test_counts_count_the_jobs_of_every_state(backend: Backend, admin: Admin) -> None:
    dead(backend, "f1")
    dead(backend, "f2")
    dead(backend, "x1")
    admin.discard("x1")
    job(backend, "ok")
    settle = claim(backend).claims[0]
    backend.settle([Settle("ok", settle.token, "ack")])
    job(backend, "run", concurrency_group="g", concurrency_limit=1)
    assert ids(claim(backend)) == ["run"]
    job(backend, "parked", concurrency_group="g", concurrency_limit=1)
    assert claim(backend).blocked == ["parked"]
    job(backend, "e1")
    job(backend, "e2")
    job(backend, "later", eta_ms=backend.now_ms() + 60_000)
    job(backend, "c1")
    admin.cancel("c1")
    counts = admin.counts()
    assert counts.to_dict() == {"enqueued": 2, "scheduled": 1, "blocked": 1, "running": 1,
                                "reserved": 0, "completed": 1, "failed": 2, "canceled": 1,
                                "discarded": 1}
    assert counts["failed"] == 2


def test_counts_and_status_tell_reserved_jobs_from_running_ones(backend: Backend,
                                                                admin: Admin) -> None:
    job(backend, "r1")
    job(backend, "r2")
    job(backend, "s1")
    job(backend, "m1", queue="mail")
    claims = {c.job_id: c.token for c in claim(backend, max_jobs=3).claims}
    [mail] = claim(backend, queues=["mail"]).claims
    # the worker's heartbeat: r1, r2 and m1 not started (prefetched), s1 started
    backend.heartbeat([("r1", claims["r1"]), ("r2", claims["r2"]), ("s1", claims["s1"]),
                       ("m1", mail.token)], [NOT_STARTED, NOT_STARTED, 0, NOT_STARTED])
    counts = admin.counts()
    assert (counts.running, counts.reserved) == (1, 3)
    queues = {q.queue: q for q in admin.status().queues}
    assert (queues[Q].running, queues[Q].reserved) == (1, 2)
    assert (queues["mail"].running, queues["mail"].reserved) == (0, 1)
    backend.heartbeat([("r1", claims["r1"])], [5])  # r1's task started
    backend.settle([Settle("r2", claims["r2"], "ack", run_ms=1)])  # r2 ran and ended
    counts = admin.counts()
    assert (counts.running, counts.reserved) == (2, 1)


def test_a_listing_is_newest_first_and_paged(backend: Backend, admin: Admin) -> None:
    for i in range(5):
        dead(backend, f"d{i}")
    first = admin.jobs("failed", per_page=2)
    assert [r.id for r in first.items] == ["d4", "d3"]
    assert (first.total, first.page, first.per_page, first.pages) == (5, 1, 2, 3)
    assert [r.id for r in admin.jobs("failed", page=2, per_page=2).items] == ["d2", "d1"]
    assert [r.id for r in admin.jobs("failed", page=3, per_page=2).items] == ["d0"]
    assert admin.jobs("failed", page=4, per_page=2).items == []
    row = first.items[0]
    assert row.state == "failed" and row.name == "proj.work" and row.queue == Q
    assert row.exc_type == "ValueError" and row.exc_message == "boom"
    assert row.reason == "task failed" and row.deliveries == 1
    assert row.at_ms == record(backend, "d4").finished_ms and row.args_repr == "()"
    with pytest.raises(ValueError):
        admin.jobs("failed", page=0)
    with pytest.raises(ValueError):
        admin.jobs("nonsense")


def test_a_listing_filters_by_task_queue_and_text(backend: Backend, admin: Admin) -> None:
    dead(backend, "a", task="proj.mail", args=["alice@example.com"])
    dead(backend, "b", task="proj.mail", queue="other", error="SMTP timeout")
    dead(backend, "c", task="proj.bill", kwargs={"customer": "ACME-42"})
    dead(backend, "d", task="proj.bill", queue="other")
    assert listed(admin, "failed", task="proj.mail") == ["b", "a"]
    assert listed(admin, "failed", queue="other") == ["d", "b"]
    assert listed(admin, "failed", task="proj.bill", queue="other") == ["d"]
    assert listed(admin, "failed", text="ALICE@") == ["a"]          # in args, any case
    assert listed(admin, "failed", text="acme-42") == ["c"]         # in kwargs
    assert listed(admin, "failed", text="smtp time") == ["b"]       # in the error message
    assert listed(admin, "failed", text="line 3") == ["d", "c", "b", "a"]  # traceback
    assert listed(admin, "failed", text="valueerror", queue=Q) == ["c", "a"]
    page = admin.jobs("failed", text="MAIL", per_page=1)  # part of the task name (#28)
    assert page.total == 2 and page.task_names == ("proj.mail",)
    page = admin.jobs("failed", task="proj.mail", per_page=1, page=2)
    assert [r.id for r in page.items] == ["a"] and page.total == 2


def test_a_listing_filters_by_time_range(backend: Backend, admin: Admin) -> None:
    dead(backend, "old1")
    dead(backend, "old2")
    mark = later(backend)
    dead(backend, "new1")
    dead(backend, "new2")
    assert listed(admin, "failed", since=mark / 1000) == ["new2", "new1"]
    assert listed(admin, "failed", until=(mark - 1) / 1000) == ["old2", "old1"]
    when = dt.datetime.fromtimestamp(mark / 1000, tz=dt.timezone.utc)
    assert listed(admin, "failed", since=when) == ["new2", "new1"]
    assert listed(admin, "failed", since=dt.timedelta(hours=1)) == [
        "new2", "new1", "old2", "old1"]
    assert listed(admin, "failed", since=mark / 1000, task="proj.work", queue=Q,
                  text="boom") == ["new2", "new1"]
    # Waiting states are filtered by their enqueue time.
    job(backend, "e-old")
    mark = later(backend)
    job(backend, "e-new")
    assert listed(admin, "enqueued", since=mark / 1000) == ["e-new"]
    assert listed(admin, "enqueued") == ["e-new", "e-old"]


def test_filtered_listings_and_queue_counts_stay_exact_as_jobs_come_and_go(
        backend: Backend, admin: Admin, monkeypatch: pytest.MonkeyPatch) -> None:
    # Redis: the listing index reads 2 members per call, so every sync takes several.
    monkeypatch.setattr("celery_plus.stores.redis.listing_index.SYNC_BATCH", 2)
    for i in range(4):
        dead(backend, f"m{i}", task="proj.mail", queue="mail")
    dead(backend, "b0", task="proj.bill")
    dead(backend, "x1", task="proj.bill", queue="mail")  # ids grow with time: ties agree

    def totals() -> tuple[int, int, int, int]:
        # one row a page: the counts must be right for jobs off the page too
        return (admin.jobs("failed", queue="mail", per_page=1).total,
                admin.jobs("failed", task="proj.mail", per_page=1).total,
                admin.jobs("failed", task="proj.bill", queue="mail", per_page=1).total,
                {q.queue: q.failed for q in admin.status().queues}.get("mail", 0))

    assert totals() == (5, 4, 1, 5)
    assert listed(admin, "failed", queue="mail") == ["x1", "m3", "m2", "m1", "m0"]
    page = admin.jobs("failed", queue="mail", page=2, per_page=2)
    assert [r.id for r in page.items] == ["m2", "m1"] and page.total == 5
    admin.retry("m3")
    admin.discard("m2")
    assert admin.purge("failed", ids=["x1"]).changed == ["x1"]
    assert totals() == (2, 2, 0, 2)
    assert listed(admin, "discarded", queue="mail") == ["m2"]
    # the retried job fails again: listed again, newest
    got = claim(backend, max_jobs=1, queues=["mail"]).claims
    assert [c.job_id for c in got] == ["m3"]
    backend.settle([Settle("m3", got[0].token, "fail", {"reason": "task failed"})])
    assert listed(admin, "failed", queue="mail") == ["m3", "m1", "m0"]
    dead(backend, "m4", task="proj.mail", queue="mail")
    dead(backend, "b2", task="proj.bill", queue=Q)
    assert totals() == (4, 4, 0, 4)
    assert listed(admin, "failed", task="proj.mail", queue="mail") == ["m4", "m3", "m1", "m0"]
    mark = later(backend)
    dead(backend, "m5", task="proj.mail", queue="mail")
    assert listed(admin, "failed", queue="mail", since=mark / 1000) == ["m5"]
    assert listed(admin, "failed", task="proj.mail", until=mark / 1000) == [
        "m4", "m3", "m1", "m0"]
    assert admin.purge("failed", all=True).matched == 7
    assert totals() == (0, 0, 0, 0)


def test_a_text_search_can_be_limited_to_the_newest_candidates(
        backend: Backend, admin: Admin) -> None:
    for i in range(5):
        dead(backend, f"d{i}", queue="mail" if i % 2 else Q, error=f"boom {i}")
    full = admin.jobs("failed", text="boom")
    assert (full.total, full.searched) == (5, None)
    cut = admin.jobs("failed", text="boom", text_limit=3)
    assert ([r.id for r in cut.items], cut.total, cut.searched) == (["d4", "d3", "d2"], 3, 3)
    assert cut.to_dict()["searched"] == 3
    assert admin.jobs("failed", text="boom 0", text_limit=3).total == 0  # d0 not searched
    assert admin.jobs("failed", text="boom 0", text_limit=5).searched is None
    by_queue = admin.jobs("failed", queue="mail", text="boom", text_limit=1)
    assert ([r.id for r in by_queue.items], by_queue.searched) == (["d3"], 1)
    page = admin.jobs("failed", text="boom", text_limit=4, page=2, per_page=3)
    assert [r.id for r in page.items] == ["d1"] and page.total == 4
    job(backend, "w1", args=["needle"])
    job(backend, "w2", args=["needle"])
    waiting = admin.jobs("enqueued", text="needle", text_limit=1)
    assert (waiting.total, waiting.searched) == (1, 1)
    with pytest.raises(ValueError, match="text_limit"):
        admin.jobs("failed", text="boom", text_limit=0)


def test_every_state_can_be_listed(backend: Backend, admin: Admin) -> None:
    job(backend, "run", concurrency_group="g", concurrency_limit=1)
    assert ids(claim(backend)) == ["run"]
    job(backend, "parked", concurrency_group="g", concurrency_limit=1)
    assert claim(backend).blocked == ["parked"]
    job(backend, "waiting")
    job(backend, "elsewhere", queue="other")
    job(backend, "later", eta_ms=backend.now_ms() + 60_000)
    assert listed(admin, "running") == ["run"]
    assert listed(admin, "blocked") == ["parked"]
    assert sorted(listed(admin, "enqueued")) == ["elsewhere", "waiting"]
    assert listed(admin, "enqueued", queue="other") == ["elsewhere"]
    assert listed(admin, "scheduled") == ["later"]
    assert listed(admin, "completed") == [] and listed(admin, "failed") == []
    row = admin.jobs("scheduled").items[0]
    assert row.state == "scheduled" and row.due_ms > backend.now_ms()
    assert admin.jobs("running").items[0].at_ms > 0  # its start time


# -- show ------------------------------------------------------------------------------------
def test_show_decodes_the_message_and_reports_attempts_history_and_traceback(
        backend: Backend, admin: Admin) -> None:
    job(backend, "a", task="proj.mail", args=["bob", 3], kwargs={"urgent": True},
        unique_lock="L", unique_window="running", max_deliveries=5)
    first = claim(backend).claims[0]
    backend.settle([Settle("a", first.token, "requeue", {"reason": "worker lost"})])
    second = claim(backend).claims[0]
    backend.settle([Settle("a", second.token, "fail", {
        "reason": "task failed", "exc_type": "KeyError", "exc_message": "'x'",
        "traceback": TRACEBACK})])
    detail = admin.show("a")
    assert detail.id == "a" and detail.state == "failed"
    assert detail.args == ["bob", 3] and detail.kwargs == {"urgent": True}
    assert detail.headers["task"] == "proj.mail" and detail.headers["id"] == "a"
    assert detail.properties["correlation_id"] == "a" and detail.decode_error == ""
    assert detail.summary.deliveries == 2 and detail.max_deliveries == 5
    assert detail.summary.exc_type == "KeyError" and detail.summary.exc_message == "'x'"
    assert detail.traceback == TRACEBACK
    assert [h["outcome"] for h in detail.history] == ["worker lost", "task failed"]
    assert detail.history[-1]["exc_type"] == "KeyError"
    assert detail.worker == "w1" and detail.finished_ms and detail.started_ms
    assert detail.unique_lock == "L" and detail.unique_window == "running"
    assert detail.unique_holder is None  # released when it was dead-lettered
    assert detail.raw_message == record(backend, "a").message
    as_json = json.loads(json.dumps(detail.to_dict()))
    assert as_json["id"] == "a" and as_json["args"] == ["bob", 3]
    assert as_json["traceback"] == TRACEBACK


def test_show_of_a_malformed_dead_letter_keeps_the_raw_message(
        backend: Backend, admin: Admin) -> None:
    backend.push_raw(Q, "bad", b"\x00 not json")
    got = claim(backend).claims[0]
    backend.settle([Settle("bad", got.token, "fail", {"reason": "malformed message",
                                                      "exc_message": "not a kombu message"})])
    detail = admin.show("bad")
    assert detail.state == "failed" and detail.summary.reason == "malformed message"
    assert detail.args is None and detail.kwargs is None
    assert "not a JSON kombu envelope" in detail.decode_error
    assert "not json" in detail.raw_message
    assert listed(admin, "failed", text="not json") == ["bad"]


def test_operations_on_a_missing_job_raise_not_found(admin: Admin) -> None:
    for operation in (admin.show, admin.retry, admin.discard, admin.cancel):
        with pytest.raises(JobNotFound) as raised:
            operation("nope")
        assert raised.value.job_id == "nope" and "'nope' not found" in str(raised.value)


# -- retry ------------------------------------------------------------------------------
def test_retry_enqueues_the_same_task_id_with_the_counter_reset_and_history_kept(
        backend: Backend, admin: Admin) -> None:
    dead(backend, "other")  # another dead letter, untouched
    job(backend, "a", max_deliveries=5)
    first = claim(backend).claims[0]
    backend.settle([Settle("a", first.token, "requeue", {"reason": "worker lost"})])
    second = claim(backend).claims[0]
    backend.settle([Settle("a", second.token, "fail", {"exc_type": "E", "traceback": "tb"})])
    message = backend.raw_message("a")
    assert record(backend, "a").deliveries == 2

    result = admin.retry("a")
    assert result.changed and (result.previous, result.state) == ("failed", "enqueued")
    rec = record(backend, "a")
    assert rec.state == "enqueued" and rec.deliveries == 0 and rec.finished_ms == 0
    assert rec.traceback == "tb"  # the last error stays visible in show()
    assert [h["outcome"] for h in history(backend, "a")] == [
        "worker lost", "task failed", "admin retry"]
    assert listed(admin, "failed") == ["other"] and listed(admin, "enqueued") == ["a"]
    got = claim(backend).claims
    assert [(c.job_id, c.deliveries) for c in got] == [("a", 1)]
    assert got[0].message == message and got[0].token > second.token


def test_retry_joins_the_back_of_its_queue_at_its_priority(
        backend: Backend, admin: Admin) -> None:
    dead(backend, "a", priority=2)
    job(backend, "b", priority=2)
    job(backend, "c", priority=5)
    admin.retry("a")
    assert ids(claim(backend)) == ["b", "a", "c"]


def test_retry_is_idempotent(backend: Backend, admin: Admin) -> None:
    dead(backend, "a")
    assert admin.retry("a").changed
    again = admin.retry("a")
    assert not again.changed and again.state == "enqueued"
    assert "not failed" in again.message
    assert [h["outcome"] for h in history(backend, "a")].count("admin retry") == 1
    claim(backend)
    assert admin.retry("a").state == "running"
    assert ids(claim(backend)) == []


def test_retry_takes_the_unique_hold_again(backend: Backend,
                                           inspect: Inspector, admin: Admin) -> None:
    dead(backend, "a", unique_lock="L", unique_window="running")
    assert inspect.holder("L") is None
    admin.retry("a")
    assert inspect.holder("L") == "a"
    dup = publish(backend, "b", unique_lock="L", unique_window="running")
    assert not dup.accepted and dup.holder_id == "a"
    dead(backend, "p", queue="q2", unique_lock="P", unique_window="pending")
    admin.retry("p")
    assert inspect.holder("P") == "p"


def test_retry_into_a_key_held_by_another_job_is_a_conflict_that_changes_nothing(
        backend: Backend, inspect: Inspector, admin: Admin) -> None:
    dead(backend, "a", unique_lock="L", unique_window="running")
    before = record(backend, "a")
    job(backend, "b", unique_lock="L", unique_window="running")
    with pytest.raises(RetryConflict) as raised:
        admin.retry("a")
    conflict = raised.value
    assert (conflict.job_id, conflict.holder_id, conflict.lock) == ("a", "b", "L")
    assert "held by job 'b'" in str(conflict)
    assert record(backend, "a") == before
    assert listed(admin, "failed") == ["a"] and inspect.holder("L") == "b"
    assert ids(claim(backend)) == ["b"]


def test_retry_of_a_ttl_job_keeps_its_own_hold_and_conflicts_with_a_new_holder(
        backend: Backend, inspect: Inspector, admin: Admin) -> None:
    dead(backend, "a", unique_lock="T", unique_window="ttl", unique_ttl_ms=60_000)
    assert inspect.holder("T") == "a"  # a ttl hold outlives the job
    deadline = inspect.hold_deadline("T")
    assert admin.retry("a").changed
    assert inspect.holder("T") == "a" and inspect.hold_deadline("T") == deadline
    claim(backend)
    dead(backend, "x", unique_lock="U", unique_window="ttl", unique_ttl_ms=300)
    wait_until(lambda: inspect.holder("U") is None, timeout=5, message="the ttl hold lapses")
    assert publish(backend, "y", unique_lock="U", unique_window="ttl",
                   unique_ttl_ms=60_000).accepted
    with pytest.raises(RetryConflict) as raised:
        admin.retry("x")
    assert raised.value.holder_id == "y"


def test_retry_of_a_job_in_a_full_concurrency_group_is_parked(
        backend: Backend, inspect: Inspector, admin: Admin) -> None:
    dead(backend, "a", concurrency_group="g", concurrency_limit=1)
    job(backend, "b", concurrency_group="g", concurrency_limit=1)
    assert ids(claim(backend)) == ["b"]
    admin.retry("a")
    assert claim(backend).blocked == ["a"]
    assert inspect.slot_holders("g") == {"b"}


# -- discard and cancel -----------------------------------------------------------------
def test_discard_keeps_the_record_as_discarded_and_is_idempotent(
        backend: Backend, admin: Admin) -> None:
    dead(backend, "a")
    result = admin.discard("a")
    assert result.changed and (result.previous, result.state) == ("failed", "discarded")
    rec = record(backend, "a")
    assert rec.state == "discarded" and rec.finished_ms > 0
    assert history(backend, "a")[-1]["outcome"] == "admin discard"
    assert listed(admin, "failed") == [] and listed(admin, "discarded") == ["a"]
    again = admin.discard("a")
    assert not again.changed and again.state == "discarded"
    assert not admin.retry("a").changed  # a discarded job is not a dead letter any more
    job(backend, "e")
    assert not admin.discard("e").changed and record(backend, "e").state == "enqueued"


def test_cancel_takes_waiting_jobs_out_and_releases_their_holds(
        backend: Backend, inspect: Inspector, admin: Admin) -> None:
    job(backend, "run", concurrency_group="g", concurrency_limit=1)
    assert ids(claim(backend)) == ["run"]
    job(backend, "parked", concurrency_group="g", concurrency_limit=1, unique_lock="B",
        unique_window="running")
    assert claim(backend).blocked == ["parked"]
    job(backend, "ready", unique_lock="R", unique_window="pending")
    job(backend, "ttl", unique_lock="T", unique_window="ttl", unique_ttl_ms=60_000)
    job(backend, "soon", eta_ms=backend.now_ms() + 300, unique_lock="S",
        unique_window="running")
    for job_id, previous in (("parked", "blocked"), ("ready", "enqueued"),
                             ("ttl", "enqueued"), ("soon", "scheduled")):
        result = admin.cancel(job_id)
        assert result.changed and (result.previous, result.state) == (previous, "canceled")
        rec = record(backend, job_id)
        assert rec.state == "canceled" and rec.finished_ms > 0
        assert history(backend, job_id)[-1]["outcome"] == "admin cancel"
    assert inspect.holds() == {"T": "ttl"}  # ttl holds are never released early
    assert inspect.blocked_groups() == set() and backend.size(Q) == 0
    assert sorted(listed(admin, "canceled")) == ["parked", "ready", "soon", "ttl"]
    # Nothing comes back: not at the due time, not when the slot frees.
    running = claim(backend, max_jobs=1)  # nothing ready
    assert ids(running) == []
    wait_until(lambda: backend.now_ms() > record(backend, "soon").finished_ms + 400,
               timeout=5, message="the canceled job's due time passes")
    assert ids(claim(backend)) == []
    assert not admin.cancel("run").changed and admin.cancel("run").state == "running"
    assert not admin.cancel("ready").changed  # idempotent
    assert record(backend, "run").state == "running"
    # The key is free again.
    assert publish(backend, "again", unique_lock="R", unique_window="pending").accepted


# -- bulk ------------------------------------------------------------------------------
def test_bulk_operations_without_a_scope_need_all(backend: Backend, admin: Admin) -> None:
    dead(backend, "a")
    with pytest.raises(UnscopedOperation, match="all=True"):
        admin.retry_many()
    with pytest.raises(UnscopedOperation):
        admin.purge("failed")
    assert record(backend, "a").state == "failed"
    assert admin.retry_many(all=True).changed == ["a"]
    dead(backend, "b", queue="q2")
    assert admin.purge("failed", all=True).changed == ["b"]
    assert backend.record("b") is None


def test_retry_many_is_scoped_by_task_queue_and_age(backend: Backend, admin: Admin) -> None:
    dead(backend, "m-old", task="proj.mail")
    dead(backend, "b-old", task="proj.bill", queue="other")
    mark = midpoint_of_a_gap(backend)
    dead(backend, "m-new", task="proj.mail")
    dead(backend, "b-new", task="proj.bill")
    age = (backend.now_ms() - mark) / 1000
    result = admin.retry_many(task="proj.mail", older_than=age)
    assert (result.matched, result.changed) == (1, ["m-old"])
    assert admin.retry_many(queue="other").changed == ["b-old"]
    assert admin.retry_many(task="proj.mail").changed == ["m-new"]
    assert listed(admin, "failed") == ["b-new"]
    # Repeating changes nothing.
    assert admin.retry_many(task="proj.mail").changed == []


def test_retry_many_reports_conflicts_and_retries_the_rest(
        backend: Backend, inspect: Inspector, admin: Admin) -> None:
    dead(backend, "a", unique_lock="L", unique_window="running")
    dead(backend, "b", unique_lock="L", unique_window="running")
    dead(backend, "c")
    result = admin.retry_many(all=True)
    assert result.matched == 3
    # The older dead letter takes the key first; the other conflicts with it.
    assert sorted(result.changed) == ["a", "c"] and result.conflicts == [("b", "a")]
    assert record(backend, "b").state == "failed" and inspect.holder("L") == "a"
    assert result.to_dict()["conflicts"] == [{"id": "b", "holder": "a"}]


def test_purge_deletes_finished_records_in_scope(backend: Backend, admin: Admin) -> None:
    dead(backend, "f1", queue="other")
    dead(backend, "f2")
    dead(backend, "d1")
    admin.discard("d1")
    job(backend, "c1")
    admin.cancel("c1")
    job(backend, "ok")
    got = claim(backend).claims[0]
    backend.settle([Settle("ok", got.token, "ack")])
    assert admin.purge("failed", queue="other").changed == ["f1"]
    assert backend.record("f1") is None and listed(admin, "failed") == ["f2"]
    assert admin.purge("discarded", all=True).changed == ["d1"]
    assert admin.purge("canceled", task="proj.work").changed == ["c1"]
    assert admin.purge("completed", task="proj.work").changed == ["ok"]
    assert admin.purge("failed", older_than=3600).changed == []
    assert admin.counts().to_dict() == {
        "enqueued": 0, "scheduled": 0, "blocked": 0, "running": 0, "reserved": 0,
        "completed": 0, "failed": 1, "canceled": 0, "discarded": 0}
    with pytest.raises(ValueError, match="unknown state"):
        admin.purge("running", all=True)


def test_bulk_operations_scoped_by_task_ids_act_on_those_jobs_only(
        backend: Backend, admin: Admin) -> None:
    for job_id in ("a", "b", "c"):
        dead(backend, job_id)
    dead(backend, "other", task="proj.other")
    job(backend, "waiting")
    result = admin.retry_many(ids=["a", "b", "a", "waiting", "nope"])
    assert (result.matched, sorted(result.changed)) == (2, ["a", "b"])
    assert [record(backend, i).state for i in "abc"] == ["enqueued", "enqueued", "failed"]
    assert admin.retry_many(ids=["a"]).changed == []  # already retried
    # ids and the other filters together: both must hold
    assert admin.purge("failed", ids=["c", "other"], task="proj.other").changed == ["other"]
    assert admin.purge("failed", ids=["c", "waiting"]).changed == ["c"]
    assert backend.record("c") is None and record(backend, "waiting").state == "enqueued"
    with pytest.raises(ValueError, match="at most 1000 task ids"):
        admin.purge("failed", ids=[f"x{i}" for i in range(1001)])
    assert admin.purge("failed", ids=[]).changed == []  # an empty selection: no-op


def test_discard_many_and_cancel_many_act_on_each_job(backend: Backend, admin: Admin) -> None:
    dead(backend, "d1")
    dead(backend, "d2")
    job(backend, "w1")
    discarded = admin.discard_many(["d1", "d2", "w1", "nope"])
    assert (discarded.matched, discarded.changed) == (3, ["d1", "d2"])
    canceled = admin.cancel_many(["w1", "d1"])
    assert (canceled.matched, canceled.changed) == (2, ["w1"])
    assert record(backend, "w1").state == "canceled"


# -- throughput ------------------------------------------------------------------------
def complete(backend: Backend, job_id: str) -> None:
    job(backend, job_id)
    [got] = claim(backend, max_jobs=1).claims
    backend.settle([Settle(job_id, got.token, "ack")])


def test_finished_since_counts_completed_and_failed_records_by_finish_time(
        backend: Backend, admin: Admin) -> None:
    complete(backend, "c1")
    dead(backend, "f1")
    mark = later(backend)
    complete(backend, "c2")
    complete(backend, "c3")
    dead(backend, "f2")
    job(backend, "waiting")
    assert admin.store.finished_since(0) == (3, 2)
    assert admin.store.finished_since(mark) == (2, 1)
    assert admin.store.finished_since(backend.now_ms() + 60_000) == (0, 0)
    [five, hour] = admin.throughput()
    assert (five.window_s, five.completed, five.failed) == (300, 3, 2)
    assert (hour.window_s, hour.completed, hour.failed) == (3600, 3, 2)
    assert five.completed_per_min == pytest.approx(0.6) and hour.failed_per_min == (
        pytest.approx(2 / 60))
    # A retried dead letter is no longer a failure on record.
    admin.retry("f1")
    assert admin.store.finished_since(0) == (3, 1)
    with pytest.raises(ValueError, match="positive"):
        admin.throughput([0])


# -- maintenance ----------------------------------------------------------------------
def test_maintenance_prunes_canceled_and_discarded_records_like_completed_ones(
        make_backend: Callable[..., Backend], admin: Admin) -> None:
    backend = make_backend(retention=(1_000, 100_000, 600_000, 100_000))
    short = Admin(admin_for(backend))
    dead(backend, "kept")
    dead(backend, "d")
    short.discard("d")
    job(backend, "c")
    short.cancel("c")

    def pruned() -> bool:
        maintain(backend)
        return backend.record("c") is None and backend.record("d") is None

    wait_until(pruned, timeout=15, message="canceled and discarded records pruned")
    assert record(backend, "kept").state == "failed"
    assert short.counts().canceled == 0 and short.counts().discarded == 0


def test_a_republished_id_leaves_the_discarded_index(backend: Backend, admin: Admin) -> None:
    dead(backend, "a")
    admin.discard("a")
    job(backend, "a")
    assert listed(admin, "discarded") == [] and admin.counts().discarded == 0
    assert listed(admin, "enqueued") == ["a"]


# -- races ------------------------------------------------------------------------------
def race(*calls: Callable[[], Any]) -> list[Any]:
    """Run ``calls`` at once (one thread each); their results, or the exceptions raised."""
    barrier = threading.Barrier(len(calls))
    results: list[Any] = [None] * len(calls)

    def run(i: int, call: Callable[[], Any]) -> None:
        barrier.wait()
        try:
            results[i] = call()
        except Exception as exc:  # reported to the test
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i, c)) for i, c in enumerate(calls)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    return results


def test_two_concurrent_retries_of_one_job_enqueue_it_once(
        backend: Backend, inspect: Inspector, make_admin: Callable[[], Admin]) -> None:
    one, two = make_admin(), make_admin()
    names = [f"r{i}" for i in range(10)]
    for name in names:
        dead(backend, name, unique_lock=f"L{name}", unique_window="running")
    for name in names:
        results = race(lambda n=name: one.retry(n), lambda n=name: two.retry(n))
        assert not [r for r in results if isinstance(r, Exception)], results
        assert sorted(r.changed for r in results) == [False, True], (name, results)
        assert [h["outcome"] for h in history(backend, name)].count("admin retry") == 1
        assert inspect.holder(f"L{name}") == name
    claimed = claim(backend, max_jobs=100)
    assert sorted(ids(claimed)) == names
    assert ids(claim(backend, max_jobs=100)) == []


def test_a_retry_racing_a_discard_has_one_winner(
        backend: Backend, make_admin: Callable[[], Admin]) -> None:
    one, two = make_admin(), make_admin()
    for i in range(10):
        name = f"x{i}"
        dead(backend, name, queue=f"q{i}")
        retried, discarded = race(lambda n=name: one.retry(n), lambda n=name: two.discard(n))
        assert retried.changed != discarded.changed, (retried, discarded)
        final = record(backend, name).state
        assert final == ("enqueued" if retried.changed else "discarded")
    assert len(listed(two, "enqueued")) + len(listed(two, "discarded")) == 10
    assert listed(two, "failed") == []


def test_concurrent_bulk_retries_retry_each_job_once(
        backend: Backend, make_admin: Callable[[], Admin]) -> None:
    one, two = make_admin(), make_admin()
    for i in range(30):
        dead(backend, f"b{i:02d}")
    first, second = race(lambda: one.retry_many(all=True), lambda: two.retry_many(all=True))
    assert sorted(first.changed + second.changed) == [f"b{i:02d}" for i in range(30)]
    assert sorted(ids(claim(backend, max_jobs=100))) == [f"b{i:02d}" for i in range(30)]


# -- status ------------------------------------------------------------------------------
def test_status_shows_queue_depths_groups_dead_letters_and_the_oldest_waiting_job(
        backend: Backend, admin: Admin) -> None:
    dead(backend, "f1", queue="mail")
    dead(backend, "f2")
    job(backend, "run", concurrency_group="g", concurrency_limit=1)
    assert ids(claim(backend)) == ["run"]
    job(backend, "p1", concurrency_group="g", concurrency_limit=1)
    job(backend, "p2", concurrency_group="g", concurrency_limit=1)
    assert sorted(claim(backend).blocked) == ["p1", "p2"]
    later(backend)
    job(backend, "first", queue="mail")
    oldest = record(backend, "first").enqueued_ms
    later(backend)
    job(backend, "second", queue="mail", priority=3)
    job(backend, "third", queue="mail")
    job(backend, "eta", queue="mail", eta_ms=backend.now_ms() + 60_000)
    status = admin.status()
    queues = {q.queue: q for q in status.queues}
    assert set(queues) == {Q, "mail"}
    mail = queues["mail"]
    assert (mail.enqueued, mail.scheduled, mail.blocked, mail.running, mail.failed) == (
        3, 1, 0, 0, 1)
    assert mail.oldest_waiting_ms == oldest
    jobs_q = queues[Q]
    assert (jobs_q.enqueued, jobs_q.blocked, jobs_q.running, jobs_q.failed) == (0, 2, 1, 1)
    assert jobs_q.oldest_waiting_ms is not None and jobs_q.oldest_waiting_ms < oldest
    assert [(g.group, g.running, g.limit, g.blocked) for g in status.groups] == [
        ("g", 1, 1, 2)]
    assert status.dead_letters == 2 and status.counts.failed == 2
    assert status.oldest_waiting_ms == jobs_q.oldest_waiting_ms
    assert status.oldest_waiting_age_s is not None and status.oldest_waiting_age_s > 0
    as_json = json.loads(json.dumps(status.to_dict()))
    assert as_json["dead_letters"] == 2 and as_json["groups"][0]["group"] == "g"


def test_status_of_an_empty_store(admin: Admin) -> None:
    status = admin.status()
    assert status.queues == [] and status.groups == [] and status.dead_letters == 0
    assert status.oldest_waiting_ms is None and status.oldest_waiting_age_s is None


# -- issue 14: order, bounded rows, activity, latency, workers ---------------------------------
def test_a_listing_can_be_oldest_first(backend: Backend, admin: Admin) -> None:
    for i in range(4):
        dead(backend, f"d{i}", task="proj.a" if i % 2 else "proj.b")
    for i in range(4):
        job(backend, f"w{i}")
    assert listed(admin, "failed", order="oldest") == ["d0", "d1", "d2", "d3"]
    assert [r.id for r in admin.jobs("failed", order="oldest", per_page=2, page=2).items] == [
        "d2", "d3"]
    assert listed(admin, "failed", task="proj.a", order="oldest") == ["d1", "d3"]
    assert listed(admin, "failed", text="boom", order="oldest") == ["d0", "d1", "d2", "d3"]
    assert admin.jobs("failed", text="boom", text_limit=2, order="oldest").searched == 2
    assert listed(admin, "enqueued", order="oldest") == ["w0", "w1", "w2", "w3"]
    assert listed(admin, "enqueued") == ["w3", "w2", "w1", "w0"]
    with pytest.raises(ValueError, match="order"):
        admin.jobs("failed", order="sideways")


def test_listing_rows_are_bounded_and_show_keeps_the_whole_job(backend: Backend,
                                                               admin: Admin) -> None:
    big = "E" * 300_000
    dead(backend, "big", error=big)
    job(backend, "huge-args", args=["A" * 300_000])
    [row] = admin.jobs("failed").items
    assert row.exc_message == "E" * 1000 + "..."
    [waiting] = admin.jobs("enqueued").items
    assert waiting.args_repr.startswith("(a message of ") and len(waiting.args_repr) < 100
    [searched] = admin.jobs("failed", text="EEE").items
    assert len(searched.exc_message) == 1003
    # show gives what the store keeps: the whole message up to the stores' cap on one detail
    assert admin.show("big").summary.exc_message == clean_text(big)
    assert admin.show("huge-args").args == ["A" * 300_000]


def test_bad_filters_are_value_errors_before_the_store(admin: Admin) -> None:
    for bad in ({"task": "a\x00b"}, {"queue": "\x00"}, {"text": "\udcff"},
                {"task": "x" * 2000}, {"page": 10**20}, {"page": 0}, {"per_page": 10**6}):
        with pytest.raises(ValueError):
            admin.jobs("failed", **bad)
    for bad_id in ("a\x00b", "\ud800", "x" * 5000):
        with pytest.raises(ValueError, match="task id"):
            admin.show(bad_id)
    with pytest.raises(ValueError):
        admin.purge("failed", older_than=10**20)


def test_activity_counts_finished_jobs_per_bucket(backend: Backend, admin: Admin) -> None:
    dead(backend, "f1")
    job(backend, "ok")
    [got] = claim(backend).claims
    backend.settle([Settle("ok", got.token, "ack")])
    activity = admin.activity(3600, 60)
    assert activity.bucket_s == 60 and len(activity.buckets) == 60
    assert activity.buckets[-1] == (1, 1)
    assert sum(c for c, _ in activity.buckets) == 1 and sum(f for _, f in activity.buckets) == 1
    assert activity.since_ms <= backend.now_ms() < activity.since_ms + 3600 * 1000
    empty = admin.store.finished_histogram(activity.since_ms - 7200_000, 60_000, 10)
    assert empty == [(0, 0)] * 10


def test_latency_is_the_wait_from_ready_to_started_per_queue(backend: Backend,
                                                            admin: Admin) -> None:
    for n in range(3):
        job(backend, f"a{n}")
    job(backend, "m1", queue="mail")
    later(backend)
    later(backend)
    claimed = claim(backend, queues=[Q, "mail"], max_jobs=10).claims
    assert len(claimed) == 4
    backend.settle([Settle(c.job_id, c.token, "ack") for c in claimed[:2]])
    [work, mail] = admin.latency()  # by queue name: Q is "jobs"
    assert (mail.queue, mail.samples) == ("mail", 1)
    assert (work.queue, work.samples) == (Q, 3)
    assert 0.001 <= work.p50_s <= work.p95_s < 60
    samples = admin.store.wait_samples(backend.now_ms() - 60_000, 2)
    assert len(samples) == 2


def test_worker_leases_group_running_jobs_by_worker(backend: Backend, admin: Admin) -> None:
    assert admin.worker_leases() == []
    for n in range(3):
        job(backend, f"r{n}")
    claim(backend, max_jobs=2, worker="host-a:101:aa11")
    claim(backend, max_jobs=1, worker="host-b:202:bb22")
    leases = {w.worker_id: w for w in admin.worker_leases()}
    assert set(leases) == {"host-a:101:aa11", "host-b:202:bb22"}
    a = leases["host-a:101:aa11"]
    assert (a.host, a.pid, a.jobs) == ("host-a", 101, 2)
    assert a.lease_deadline_ms > backend.now_ms() and a.oldest_start_ms <= backend.now_ms()
    assert leases["host-b:202:bb22"].jobs == 1


def test_a_text_search_pages_through_chunks_in_order(backend: Backend, admin: Admin) -> None:
    """A text search reads its candidates in chunks (keyset paging on time and id): more
    than a chunk of matches, ties on the finish time included, all found in order."""
    from celery_plus.model.admin import SEARCH_CHUNK

    count = SEARCH_CHUNK * 2 + 7
    for n in range(count):
        dead(backend, f"s{n:03}", error=f"needle {n}" if n % 3 else "haystack")
    expected = [j for j in listed(admin, "failed") if int(j[1:]) % 3]
    assert len(expected) == len([n for n in range(count) if n % 3])
    assert listed(admin, "failed", text="needle") == expected
    assert listed(admin, "failed", text="needle", order="oldest") == expected[::-1]
    page = admin.jobs("failed", text="needle", page=3, per_page=20)
    assert page.total == len(expected) and [r.id for r in page.items] == expected[40:60]
