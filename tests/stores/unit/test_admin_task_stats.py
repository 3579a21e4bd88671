"""The per-task breakdown (issue 28: "per-task breakdown: counts, failure rate, runtime
p50/p95") from the Python API, the CLI and the dashboard, on SQLite, Redis and PostgreSQL."""

from __future__ import annotations

import json
import re

import pytest

from celery_plus.admin import connect
from celery_plus.admin.web import Dashboard
from celery_plus.model.store import Settle
from tests.fast.unit.test_admin_cli import Store, run
from tests.fast.unit.test_admin_web_security import OPERATOR
from tests.stores.unit.test_admin_web import call


def seed(store: Store) -> None:
    """proj.mail: 2 waiting, 1 running, 3 succeeded, 1 dead; proj.bill: 1 waiting."""
    for n in range(7):
        store.job(f"m{n}", task="proj.mail")
    store.job("b0", task="proj.bill", queue="billing")
    claims = store.backend.claim(["celery"], "w1", 5).claims
    assert [c.job_id for c in claims] == [f"m{n}" for n in range(5)]
    settles = [Settle(c.job_id, c.token, "ack", None) for c in claims[:3]]
    settles.append(Settle(claims[3].job_id, claims[3].token, "fail", {
        "reason": "task failed", "exc_type": "ValueError", "exc_message": "bad",
        "traceback": ""}))
    store.backend.settle(settles)


def test_counts_failure_rate_and_runtimes_per_task(store: Store) -> None:
    seed(store)
    with connect(store.app) as admin:
        found = admin.task_breakdown(3600)
        by_name = {t.name: t for t in found.tasks}
        mail, bill = by_name["proj.mail"], by_name["proj.bill"]
        assert [t.name for t in found.tasks] == ["proj.mail", "proj.bill"]  # busiest first
        assert (mail.waiting, mail.running, mail.succeeded, mail.failed, mail.dead) == \
            (2, 1, 3, 1, 1)
        assert mail.failure_rate == pytest.approx(0.25)
        assert mail.p50_ms is not None and mail.p95_ms is not None
        assert 0 <= mail.p50_ms <= mail.p95_ms < 60_000
        assert (bill.waiting, bill.running, bill.succeeded, bill.failed, bill.dead) == \
            (1, 0, 0, 0, 0)
        assert bill.failure_rate is None and bill.p50_ms is None
        assert found.sampled == ()
        small = admin.task_breakdown(3600, sample=2)  # more jobs than read: said so
        assert "enqueued" in small.sampled and "completed" in small.sampled
        with pytest.raises(ValueError, match="window"):
            admin.task_breakdown(0)


def test_the_cli_and_the_dashboard_show_the_breakdown(store: Store, web: Dashboard) -> None:
    seed(store)
    result = run(store, "tasks")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["TASK", "WAITING", "RUNNING", "SUCCEEDED", "FAILED", "DEAD",
                                "FAIL", "RATE", "P50", "P95"]
    assert lines[1].split()[:7] == ["proj.mail", "2", "1", "3", "1", "1", "25.0%"]
    data = json.loads(run(store, "tasks", "--window", "15m", "--json").stdout)
    assert data["window_s"] == 900 and data["tasks"][0]["succeeded"] == 3
    assert run(store, "tasks", "--window", "2y").exit_code == 2
    status, _, page = call(web, "/tasks", headers=OPERATOR)
    assert status == "200 OK", page
    row = re.search(r"<tr><td><a [^>]*>proj\.mail</a></td>(.*?)</tr>", page)
    assert row is not None
    cells = re.findall(r"<td>(.*?)</td>", row.group(1))
    assert cells[:6] == ["2", "1", "3", "1", "1", "25.0%"]
    status, _, body = call(web, "/api/tasks", query="window=6h", headers=OPERATOR)
    assert status == "200 OK" and json.loads(body)["window_s"] == 21600
    assert call(web, "/tasks", query="window=1y", headers=OPERATOR)[0] == "400 Bad Request"
