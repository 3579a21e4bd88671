"""Errors grouped, act on every match of a filter and the per-task breakdown on the
in-process store (``plus+memory://``), whose admin groups and filters its records in Python;
the other stores run the same features in ``tests/stores/unit/test_admin_{error_groups,
filter_actions,task_stats}.py``."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from celery_plus.admin import Admin, connect
from celery_plus.model.store import Backend, NewJob, Settle


@pytest.fixture
def admin() -> Iterator[Admin]:
    with connect(f"plus+memory://{uuid.uuid4().hex}") as opened:
        yield opened


def backend_of(admin: Admin) -> Backend:
    backend: Backend = admin.store.backend  # type: ignore[attr-defined]
    return backend


def dead(admin: Admin, job_id: str, exc_type: str, message: str, task: str = "proj.t") -> None:
    backend = backend_of(admin)
    assert backend.publish(NewJob(id=job_id, queue="q", message="{}", name=task)).accepted
    [claim] = backend.claim(["q"], "w", 1).claims
    backend.settle([Settle(job_id, claim.token, "fail", {
        "reason": "task failed", "exc_type": exc_type, "exc_message": message,
        "traceback": ""})])


def test_groups_retry_per_group_filters_and_the_breakdown(admin: Admin) -> None:
    for n in range(3):
        dead(admin, f"s{n}", "ConnectionError", f"SMTP down\nattempt {n}")
    dead(admin, "c", "ValueError", "card declined", task="proj.bill")
    found = admin.error_groups()
    assert [(g.exc_type, g.message, g.count) for g in found.groups] == [
        ("ConnectionError", "SMTP down", 3), ("ValueError", "card declined", 1)]
    assert [r.id for r in admin.error_group_jobs("ConnectionError", "SMTP down").items] == \
        ["s2", "s1", "s0"]
    assert sorted(admin.retry_group("ConnectionError", "SMTP down").changed) == \
        ["s0", "s1", "s2"]
    assert admin.count_matching("enqueued", task="proj.t") == 3
    assert admin.act_on_filter("cancel", "enqueued", task="proj.t").matched == 3
    tasks = {t.name: t for t in admin.task_breakdown().tasks}
    assert list(tasks) == ["proj.bill"]  # proj.t: canceled, neither waiting nor finished
    assert (tasks["proj.bill"].failed, tasks["proj.bill"].dead) == (1, 1)
    assert tasks["proj.bill"].failure_rate == 1.0
    assert admin.act_on_filter("discard", "failed", text="declined").changed == ["c"]
