"""SQL stores' admin with more jobs than it counts (``admin/capped.py``): counts stop at
``CAPPED`` (shown ``10000+``), a state over the cap is counted per queue by a loose index scan,
and a large enqueued listing is paged in the claim index's order. Counting a million rows took
0.6 to 1.5 s per page (``benchmarks/backlog.py``); these tests seed just over the cap with one
``INSERT ... SELECT`` copying a published job's row."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from celery_plus.admin import Admin, admin_for
from celery_plus.cli.admin import status_text
from celery_plus.model.capped import CAPPED, COUNT_CAP, count_text
from celery_plus.model.store import Backend
from tests.fast.conformance.stores import backends_on_one_store
from tests.fast.conformance.support import publish
from tests.fast.conformance.test_admin import envelope
from tests.inspectors import inspector_for

TASK = "proj.many"
#: Copies of the template job on queue "a": past the cap.
MANY = COUNT_CAP + 7

_COPY = ("INSERT INTO jobs (id, queue, name, msg, state, score, max_deliveries, enqueued_ms, "
         "due_ms) SELECT t.id || '-' || {n}, t.queue, t.name, t.msg, t.state, "
         "t.score + CAST({n} AS BIGINT) * 1000000, t.max_deliveries, t.enqueued_ms + {n}, t.due_ms "
         "FROM jobs t, {series} WHERE t.id = {mark}")


def copy_rows(backend: Any, kind: str, job_id: str, count: int) -> None:
    """``count`` copies of job ``job_id``'s row (ids ``<id>-1``..., later and behind it)."""
    if kind == "postgres":
        backend._rows(_COPY.format(n="g", series="generate_series(1, %s) g", mark="%s")
                      + " RETURNING NULL", (count, job_id))
        return
    series = "(WITH RECURSIVE s(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM s WHERE n < ?) " \
             "SELECT n FROM s) g"
    backend._write(lambda tx: tx.run(_COPY.format(n="g.n", series=series, mark="?"), count,
                                     job_id))


@pytest.fixture(params=["sqlite", "postgres"])
def crowded(request: pytest.FixtureRequest, tmp_path: Path
            ) -> Iterator[tuple[Backend, Admin]]:
    """Queue "a": job a0 and MANY copies behind it; queue "b": 3 jobs."""
    with backends_on_one_store(request.param, tmp_path) as make:
        backend: Backend = make()
        for job_id, queue in (("a0", "a"), ("b0", "b"), ("b1", "b"), ("b2", "b")):
            assert publish(backend, job_id, envelope(job_id, TASK), queue=queue,
                           name=TASK).accepted
        copy_rows(backend, request.param, "a0", MANY)
        with Admin(admin_for(backend)) as admin:
            yield backend, admin


def ids(page: Any) -> list[str]:
    return [row.id for row in page.items]


def test_counts_stop_at_the_cap_and_say_so(crowded: tuple[Backend, Admin]) -> None:
    _, admin = crowded
    counts = admin.counts()
    assert counts.enqueued == CAPPED and count_text(counts.enqueued) == f"{COUNT_CAP}+"
    assert counts.failed == 0 and counts.scheduled == 0
    status = admin.status()
    assert {q.queue: q.enqueued for q in status.queues} == {"a": CAPPED, "b": 3}
    assert f"{COUNT_CAP}+" in status_text(status)


def test_a_state_over_the_cap_still_shows_each_queue_and_its_oldest_job(
        crowded: tuple[Backend, Admin]) -> None:
    backend, admin = crowded
    a0, b0 = (int((inspector_for(backend).job(i) or {})["enq"]) for i in ("a0", "b0"))
    oldest = {q.queue: q.oldest_waiting_ms for q in admin.status().queues}
    assert oldest == {"a": a0, "b": b0}


def test_a_listing_over_the_cap_is_paged_in_claim_order(
        crowded: tuple[Backend, Admin]) -> None:
    _, admin = crowded
    first = admin.jobs("enqueued", per_page=5)
    assert first.total == CAPPED and first.capped and first.pages == 2001
    # Newest first: queue b before queue a, each from its tail.
    assert ids(first) == ["b2", "b1", "b0", f"a0-{MANY}", f"a0-{MANY - 1}"]
    deep = admin.jobs("enqueued", per_page=5, page=2001)  # past the count: still listed
    assert ids(deep) == [f"a0-{MANY - 9997 - i}" for i in range(5)]
    assert deep.pages == 2002
    oldest = admin.jobs("enqueued", per_page=3, order="oldest")
    assert ids(oldest) == ["a0", "a0-1", "a0-2"]
    only_b = admin.jobs("enqueued", queue="b", per_page=5)
    assert ids(only_b) == ["b2", "b1", "b0"] and only_b.total == 3 and not only_b.capped


def test_a_task_listing_over_the_cap_is_paged_in_claim_order(
        crowded: tuple[Backend, Admin]) -> None:
    """No index orders one task's waiting jobs by time: sorting every match took 1.5 to
    3.6 s at a million (issue #28), so the claim index is walked, as without a filter."""
    _, admin = crowded
    page = admin.jobs("enqueued", task=TASK, per_page=5)
    assert page.total == CAPPED and page.capped
    assert ids(page) == ["b2", "b1", "b0", f"a0-{MANY}", f"a0-{MANY - 1}"]
    assert ids(admin.jobs("enqueued", task=TASK, per_page=2, order="oldest")) == ["a0", "a0-1"]
    assert admin.jobs("enqueued", task="proj.other").total == 0


def test_a_time_filtered_listing_over_the_cap_is_paged_in_claim_order(
        crowded: tuple[Backend, Admin]) -> None:
    backend, admin = crowded
    page = admin.jobs("enqueued", since=1, per_page=4)
    assert page.total == CAPPED
    assert ids(page) == ["b2", "b1", "b0", f"a0-{MANY}"]
    a0 = int((inspector_for(backend).job("a0") or {})["enq"])
    early = admin.jobs("enqueued", queue="a", until=(a0 + 2) / 1000, per_page=5)
    assert ids(early) == ["a0-2", "a0-1", "a0"] and early.total == 3  # copies: +n ms


def test_a_finished_listing_over_the_cap_keeps_its_time_order(tmp_path: Path) -> None:
    with backends_on_one_store("sqlite", tmp_path) as make:
        store = make()
        assert publish(store, "x", envelope("x", TASK), name=TASK).accepted
        copy_rows(store, "sqlite", "x", COUNT_CAP)
        store._write(lambda tx: tx.run(
            "UPDATE jobs SET state = 'failed', finished_ms = enqueued_ms"))
        with Admin(admin_for(store)) as admin:
            page = admin.jobs("failed", task=TASK, per_page=2)
            assert page.total == CAPPED and ids(page) == [f"x-{COUNT_CAP}",
                                                           f"x-{COUNT_CAP - 1}"]


def test_within_the_cap_counts_are_exact(tmp_path: Path) -> None:
    with backends_on_one_store("sqlite", tmp_path) as make:
        store = make()
        assert publish(store, "x", envelope("x", TASK), name=TASK).accepted
        copy_rows(store, "sqlite", "x", COUNT_CAP - 1)
        with Admin(admin_for(store)) as admin:
            assert admin.counts().enqueued == COUNT_CAP
            page = admin.jobs("enqueued", per_page=50)
            assert page.total == COUNT_CAP and not page.capped and page.pages == 200


def test_the_dashboard_shows_a_capped_count_as_more_than_the_cap(tmp_path: Path) -> None:
    from celery_plus.admin.web import make_app
    from tests.fast.conformance.stores import sqlite_file
    from tests.stores.unit.test_admin_web import ADMIN_TOKEN, call

    with backends_on_one_store("sqlite", tmp_path) as make:
        store = make()
        assert publish(store, "x", envelope("x", TASK), queue="a", name=TASK).accepted
        copy_rows(store, "sqlite", "x", COUNT_CAP)
        web = make_app(f"plus+sqlite:///{sqlite_file(tmp_path)}", admin_token=ADMIN_TOKEN)
        try:
            _, _, overview = call(web, "/")
            _, _, listing = call(web, "/jobs/enqueued", query="per_page=50")
            _, _, metrics = call(web, "/metrics")
        finally:
            web.close()
    assert f"<td>{COUNT_CAP}+</td>" in overview
    assert f"{COUNT_CAP}+ jobs, page 1 of 201+" in listing
    assert f'celery_plus_jobs{{state="enqueued"}} {float(CAPPED)}' in metrics.splitlines()


def test_a_text_search_of_a_task_over_the_cap_reads_its_window_in_claim_order(
        crowded: tuple[Backend, Admin]) -> None:
    """A text search in the listing of a task over the cap reads its window from the claim
    index, as the listing pages it (issue #28): newest first, queue by queue."""
    _, admin = crowded
    page = admin.jobs("enqueued", task=TASK, text="MANY", text_limit=4, per_page=10)
    # Queue b first, then queue a from its tail (in time order: four copies of a0).
    assert ids(page) == ["b2", "b1", "b0", f"a0-{MANY}"] and page.searched == 4
