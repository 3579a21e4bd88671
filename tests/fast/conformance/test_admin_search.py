"""Search by id, by part of a task name and by text (issue #28), on every store.

A search text that is a job's id finds that job by one record read; a part of a task name
lists the matching task names (each a ``task`` filter) and matches the jobs of those tasks in
the scan window; argument and error text is matched in the window at read time, so a job
published after an earlier search, or a dead letter retried since, is found where it is now.
Odd text (``%``, ``_``, NUL inside arguments, emoji) is matched literally; a search text with a
NUL or a lone surrogate is refused with a clear error. The server stores run this module too
(``tests/stores/conformance``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from celery_plus.admin import Admin, admin_for
from celery_plus.admin.search import task_names
from celery_plus.model.store import Backend

from .test_admin import dead, job


@pytest.fixture
def admin(backend: Backend) -> Iterator[Admin]:
    yield Admin(admin_for(backend))


def found(admin: Admin, state: str, text: str, **filters: Any) -> list[str]:
    return [row.id for row in admin.jobs(state, text=text, per_page=100, **filters).items]


def test_a_job_id_finds_that_job_alone_in_its_state(backend: Backend, admin: Admin) -> None:
    dead(backend, "id-3")
    dead(backend, "id-4", error="x" * 5000)
    job(backend, "id-1", args=["id-2"])
    job(backend, "id-2")
    page = admin.jobs("enqueued", text="id-2")
    assert page.by_id and [r.id for r in page.items] == ["id-2"] and page.total == 1
    assert page.to_dict()["by_id"] is True
    # An id of a job in another state, or outside the filters, is searched as text.
    other = admin.jobs("enqueued", text="id-3")
    assert not other.by_id and other.items == []
    assert not admin.jobs("enqueued", text="id-2", task="proj.other").by_id
    assert admin.jobs("failed", text="id-3").by_id
    # Page 2 of a one-job answer is empty, and says the same.
    assert admin.jobs("enqueued", text="id-2", page=2).items == []
    # The row is cut as a listing's rows are.
    [row] = admin.jobs("failed", text="id-4").items
    assert row.exc_message == "x" * 1000 + "..."


def test_part_of_a_task_name_lists_the_names_and_matches_their_jobs(
        backend: Backend, admin: Admin) -> None:
    job(backend, "m1", task="billing.send_invoice")
    job(backend, "m2", task="billing.send_reminder")
    job(backend, "m3", task="reports.build")
    page = admin.jobs("enqueued", text="SEND_")
    assert page.task_names == ("billing.send_invoice", "billing.send_reminder")
    assert sorted(r.id for r in page.items) == ["m1", "m2"]
    assert found(admin, "enqueued", "send_", task="billing.send_reminder") == ["m2"]
    assert task_names(None, ["a.b", "c.send"], "SEND") == ["c.send"]


def test_text_search_sees_jobs_published_after_an_earlier_search(
        backend: Backend, admin: Admin) -> None:
    job(backend, "t1", kwargs={"customer": "acme-1"})
    assert found(admin, "enqueued", "ACME") == ["t1"]
    job(backend, "t2", kwargs={"customer": "acme-2"})
    assert sorted(found(admin, "enqueued", "acme")) == ["t1", "t2"]
    assert found(admin, "enqueued", "acme-2") == ["t2"]


def test_a_retried_dead_letter_is_found_where_it_is_now(backend: Backend, admin: Admin) -> None:
    dead(backend, "r1", args=["needle-r1"], error="mailbox full")
    dead(backend, "r2", error="mailbox full")
    assert sorted(found(admin, "failed", "MAILBOX")) == ["r1", "r2"]
    assert admin.retry("r1").changed
    assert found(admin, "failed", "mailbox") == ["r2"]
    assert found(admin, "enqueued", "needle-r1") == ["r1"]
    assert found(admin, "failed", "needle-r1") == []
    assert admin.discard("r2").changed
    assert found(admin, "failed", "mailbox") == []
    assert found(admin, "discarded", "mailbox") == ["r2"]


def test_odd_text_is_matched_literally(backend: Backend, admin: Admin) -> None:
    job(backend, "p", args=["100% sure"])
    job(backend, "u", args=["snake_case"])
    job(backend, "n", args=["nul\x00inside"])
    job(backend, "s", args=["emoji \U0001f600 here"])
    job(backend, "plain", args=["nothing odd"])
    assert found(admin, "enqueued", "%") == ["p"]
    assert found(admin, "enqueued", "_") == ["u"]
    assert found(admin, "enqueued", "0% s") == ["p"]
    assert found(admin, "enqueued", "nul") == ["n"]  # the argument with a NUL inside
    assert found(admin, "enqueued", "\U0001f600") == ["s"]
    for bad in ("a\x00b", "\udcff"):
        with pytest.raises(ValueError, match="text"):
            admin.jobs("enqueued", text=bad)
