"""The admin's text search, every store: what it looks in (id, task name, the arguments as
Celery shows them, the error), that the SQL stores' index follows every change, and that a
search cut short by ``text_limit`` still finds a job by its id."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from celery_plus.admin.api import Admin
from celery_plus.model.admin import SEARCH_MIN
from celery_plus.model.store import Backend, Settle
from celery_plus.stores.registry import admin_for

from .support import claim
from .test_admin import dead, job, listed

#: Stores whose index answers a search of every job (Redis reads a bounded window).
INDEXED = {"memory": True, "sqlite": True, "postgres": True}


@pytest.fixture
def admin(backend: Backend) -> Iterator[Admin]:
    yield Admin(admin_for(backend))


def test_a_search_looks_in_the_id_the_task_name_the_arguments_and_the_error(
        backend: Backend, admin: Admin) -> None:
    dead(backend, "id-5f3a9c", task="proj.mail.send_invoice", args=["alice@example.com"])
    dead(backend, "id-77", task="proj.bill", kwargs={"customer": "ACME-42"},
         error="SMTP timeout")
    job(backend, "w-1", task="proj.mail.send_invoice", args=["bob", 50])
    job(backend, "w-2", task="proj.report", kwargs={"discount": "50%_off"})
    assert listed(admin, "failed", text="id-5f3a9c") == ["id-5f3a9c"]     # the whole id
    assert listed(admin, "failed", text="5F3A") == ["id-5f3a9c"]          # part of it
    assert listed(admin, "failed", text="SEND_INV") == ["id-5f3a9c"]      # the task name
    assert listed(admin, "enqueued", text="send_inv") == ["w-1"]
    assert listed(admin, "enqueued", text="'bob', 50") == ["w-1"]         # argsrepr
    assert listed(admin, "failed", text="'customer': 'ACME") == ["id-77"]  # kwargsrepr
    assert listed(admin, "failed", text="smtp tim") == ["id-77"]          # the error
    assert listed(admin, "failed", text="ValueErr") == ["id-77", "id-5f3a9c"]
    assert listed(admin, "enqueued", text="0%_o") == ["w-2"]              # no wildcards
    assert listed(admin, "enqueued", text="0%%o") == []
    assert listed(admin, "enqueued", text="b_b") == []
    assert listed(admin, "enqueued", text="w-") == ["w-2", "w-1"]         # shorter than 3
    assert listed(admin, "enqueued", text="zzz-nothing") == []
    page = admin.jobs("enqueued", text="proj.", per_page=1, page=2)
    assert ([r.id for r in page.items], page.total) == (["w-1"], 2)
    assert listed(admin, "enqueued", text="proj.", task="proj.report") == ["w-2"]


def test_the_index_follows_publishes_failures_retries_and_deletes(
        backend: Backend, admin: Admin) -> None:
    job(backend, "j1", task="proj.pay", args=["first-run"])
    assert listed(admin, "enqueued", text="first-run") == ["j1"]
    assert listed(admin, "enqueued", text="gateway down") == []
    [got] = claim(backend).claims
    backend.settle([Settle("j1", got.token, "fail", {"reason": "task failed",
                                                     "exc_type": "IOError",
                                                     "exc_message": "gateway down"})])
    assert listed(admin, "failed", text="GATEWAY DOWN") == ["j1"]
    assert listed(admin, "enqueued", text="first-run") == []
    admin.retry("j1")
    assert listed(admin, "enqueued", text="first-run") == ["j1"]
    admin.cancel("j1")
    assert listed(admin, "canceled", text="first-run") == ["j1"]
    assert admin.purge("canceled", all=True).changed == ["j1"]
    assert listed(admin, "canceled", text="first-run") == []
    job(backend, "j1", task="proj.pay", args=["second-run"])  # the id again, a new job
    assert listed(admin, "enqueued", text="second-run") == ["j1"]
    assert listed(admin, "enqueued", text="first-run") == []


def test_a_search_cut_short_still_finds_a_job_by_its_id(backend: Backend, admin: Admin) -> None:
    job(backend, "needle-old", args=["x"])
    for i in range(3):
        job(backend, f"new-{i}", args=["x"])
    page = admin.jobs("enqueued", text="needle-old", text_limit=2)
    assert [r.id for r in page.items] == ["needle-old"] and page.searched == 2
    page = admin.jobs("enqueued", text="'x'", text_limit=2)
    assert [r.id for r in page.items] == ["new-2", "new-1"]


def test_the_store_says_whether_an_index_answers(backend: Backend, backend_kind: str,
                                                  admin: Admin) -> None:
    indexed = INDEXED.get(backend_kind, False)
    assert admin.text_indexed("enqueued", "x" * SEARCH_MIN) is indexed
    assert admin.text_indexed("failed", "x" * (SEARCH_MIN - 1)) is (backend_kind == "memory")
    with pytest.raises(ValueError):
        admin.text_indexed("nonsense", "abc")
