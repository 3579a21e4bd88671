"""A bulk action stopped by its request's deadline or by its client leaving (issue #28, review
findings 5 and 6), on SQLite, Redis and PostgreSQL: 3,000 dead letters, "retry every match of
a text filter"; the work stops at the next checkpoint (between two batches), the answer says
why and how many it retried, and those are exactly the jobs that moved (the rest untouched)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from celery_plus.admin import api, connect, deadline
from celery_plus.admin.web import Dashboard, make_app
from celery_plus.model.admin import BATCH
from celery_plus.model.store import Settle
from tests.fast.unit.test_admin_cli import Store, new_job, run
from tests.stores.unit.test_admin_web import BEARER, call

DEAD = 3_000
RETRY_ALL = {"do": "retry:scope", "text": "needle", "confirm": "1"}


def seed(store: Store, n: int = DEAD) -> list[str]:
    """``n`` dead letters of one error group (ConnectionError: needle in a haystack),
    published, claimed and failed a batch at a time."""
    ids = [f"d{i:04}" for i in range(n)]
    for start in range(0, n, BATCH):  # (one at a time, 3,000 took 4-9 s per test in CI)
        outcomes = store.backend.publish_many([new_job(j) for j in ids[start:start + BATCH]])
        assert all(o.accepted for o in outcomes)
    while True:
        claims = store.backend.claim(["celery"], "w1", BATCH).claims
        if not claims:
            return ids
        store.backend.settle([Settle(c.job_id, c.token, "fail", {
            "reason": "task failed", "exc_type": "ConnectionError",
            "exc_message": "needle in a haystack"}) for c in claims])


@pytest.fixture
def dead(store: Store) -> Iterator[tuple[Store, list[str]]]:
    yield store, seed(store)


def consistent(store: Store, ids: list[str], retried: list[str]) -> None:
    """The jobs retried are enqueued (once each, in the queue's count), the others still dead
    letters."""
    assert len(set(retried)) == len(retried)
    moved = set(retried)
    states = {job_id: store.state(job_id) for job_id in ids}
    assert {j for j, st in states.items() if st == "enqueued"} == moved
    assert all(st == "failed" for j, st in states.items() if j not in moved)
    with connect(store.app) as admin:
        counts = admin.counts()
    assert (counts.enqueued, counts.failed) == (len(moved), len(ids) - len(moved))


def count_batches(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The jobs retried by each batch (each a ``retry_many(ids=...)``) from now on."""
    batches: list[int] = []
    retry_many = api.Admin.retry_many

    def counted(self: api.Admin, **kw: Any) -> Any:
        done = retry_many(self, **kw)
        batches.append(len(done.changed))
        return done

    monkeypatch.setattr(api.Admin, "retry_many", counted)
    return batches


def test_a_retry_all_whose_client_left_stops_and_says_what_it_did(
        dead: tuple[Store, list[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    store, ids = dead
    batches = count_batches(monkeypatch)
    dashboard = make_app(store.app)
    try:
        # the client leaves once two batches are retried (as a browser closed meanwhile)
        status, headers, text = call(dashboard, "/jobs/failed/bulk", "POST", RETRY_ALL, headers={
            **BEARER, "waitress.client_disconnected": lambda: len(batches) >= 2,  # type: ignore[dict-item]
        })
    finally:
        dashboard.close()
    assert status == "503 Service Unavailable" and headers["Retry-After"], text
    assert batches == [BATCH, BATCH]
    assert text.startswith(f"stopped: the client left (closed the connection); retried "
                           f"{2 * BATCH} jobs before that. The other matches are untouched"), text
    assert "longer than" not in text
    retried = [job_id for job_id in ids if store.state(job_id) == "enqueued"]
    assert len(retried) == 2 * BATCH
    consistent(store, ids, retried)


def slow_batches(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """Each batch of a retry takes at least ``seconds`` (a store slower than this machine's:
    the 3,000 retries can otherwise end inside the deadline, as SQLite's did in 0.2 s)."""
    retry_many = api.Admin.retry_many

    def slow(self: api.Admin, **kw: Any) -> Any:
        done = retry_many(self, **kw)
        time.sleep(seconds)
        return done

    monkeypatch.setattr(api.Admin, "retry_many", slow)


def test_a_retry_all_past_a_lowered_deadline_stops_and_says_what_it_did(
        dead: tuple[Store, list[str]], monkeypatch: pytest.MonkeyPatch) -> None:
    store, ids = dead
    slow_batches(monkeypatch, 0.15)  # the 0.2 s deadline passes within two batches of six
    with connect(store.app) as admin:
        deadline.bind(admin.store)
        with pytest.raises(deadline.Stopped) as stopped, deadline.bounded(0.2):
            admin.act_on_filter("retry", "failed", text="needle")
    result = stopped.value.result
    assert result is not None and result.stopped == stopped.value.reason
    assert result.stopped == "the request's deadline of 0.2 s passed"
    assert len(result.changed) < DEAD and result.to_dict()["stopped"] == result.stopped
    consistent(store, ids, result.changed)
    assert f"retried {len(result.changed)} jobs before that" in deadline.stopped_text(
        stopped.value)
    # the CLI's --deadline: the rest, stopped again, says so (JSON on stdout, text on stderr)
    done = run(store, "bulk", "retry", "failed", "--text", "needle", "--deadline", "0.2s",
               "--yes", "--json")
    assert done.exit_code == 1, done.output
    report = json.loads(done.stdout)
    assert report["stopped"] == "the request's deadline of 0.2 s passed"
    assert f"retried {report['changed']} jobs before that" in done.stderr
    assert len(result.changed) + report["changed"] < DEAD
    consistent(store, ids, [*result.changed, *report["ids"]])


def test_the_dashboard_names_the_deadline_it_had(web: Dashboard, store: Store) -> None:
    ids = seed(store, 600)
    web.request_deadline = 0.0
    status, _, text = call(web, "/jobs/failed/bulk", "POST", RETRY_ALL, headers=BEARER)
    assert status == "503 Service Unavailable", text
    assert text.startswith("stopped: the request's deadline of 0 s passed; retried 0 jobs"), text
    consistent(store, ids, [])


def test_a_group_retry_whose_client_left_says_what_it_did(
        web: Dashboard, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    ids = seed(store, 3 * BATCH)
    batches = count_batches(monkeypatch)
    form = {"type": "ConnectionError", "message": "needle in a haystack", "confirm": "1"}
    status, _, text = call(web, "/errors/retry", "POST", form, headers={
        **BEARER, "waitress.client_disconnected": lambda: len(batches) >= 1,  # type: ignore[dict-item]
    })
    assert status == "503 Service Unavailable", text
    assert batches == [BATCH]
    assert text.startswith(f"stopped: the client left (closed the connection); retried {BATCH} "
                           "jobs before that"), text
    consistent(store, ids, [job_id for job_id in ids if store.state(job_id) == "enqueued"])
    with connect(store.app) as admin:
        assert admin.counts().enqueued == BATCH


def test_selected_jobs_discarded_until_the_client_left_says_how_many(
        web: Dashboard, store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    ids = seed(store, 2 * BATCH)
    admin_store = web.admin().store
    discard_many = admin_store.discard_many
    calls: list[int] = []

    def counted(chunk: Any) -> Any:
        done = discard_many(chunk)
        calls.append(len(done))
        return done

    monkeypatch.setattr(admin_store, "discard_many", counted)
    form = [("do", "discard:selected"), ("confirm", "1"), *(("id", j) for j in ids)]
    status, _, text = call(web, "/jobs/failed/bulk", "POST", form, headers={
        **BEARER, "waitress.client_disconnected": lambda: len(calls) >= 1,  # type: ignore[dict-item]
    })
    assert status == "503 Service Unavailable" and calls == [BATCH], text
    assert f"discarded {BATCH} jobs before that" in text, text
    states = [store.state(job_id) for job_id in ids]
    assert states == ["discarded"] * BATCH + ["failed"] * BATCH
