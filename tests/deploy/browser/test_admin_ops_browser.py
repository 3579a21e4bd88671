"""The operator's bulk features in a real browser (headless Chromium, Selenium) on each store
(issue #28; docs/admin.md): errors grouped by type and message with retry per group; select
all on a page and act on every match of a filter; the per-task breakdown from jobs a real
worker ran.

Each test is parametrized over Redis, SQLite and PostgreSQL (the README's suite runs each on
one of them: tests/deploy/matrix.py). Dead letters are made through the store (published by
the app, claimed and settled as failed), which keeps the first two cheap; the breakdown's jobs
are run by a real ``celery-plus worker``. Every step is a click on a link or a button.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from celery_plus.model.store import Backend, Settle
from tests.deploy.browser.conftest import Browser, Site
from tests.deploy.e2e.conftest import BROKERS, Worker
from tests.inspectors import inspector_for
from tests.support import wait_until

stores = pytest.mark.parametrize("broker_kind", BROKERS, indirect=True)


def dead_letter(site: Site, exc_type: str, message: str, task: str = "proj.fail") -> str:
    """A job published by the app, claimed and settled as failed with this error; its id."""
    job_id = str(site.app.send_task(task, args=["x"], queue="celery").id)
    [claim] = site.backend.claim(["celery"], "browser-test", 1).claims
    assert claim.job_id == job_id
    site.backend.settle([Settle(job_id, claim.token, "fail", {
        "reason": "task failed", "exc_type": exc_type, "exc_message": message,
        "traceback": f"Traceback (most recent call last):\n{exc_type}: {message}"})])
    return job_id


def state(backend: Backend, job_id: str) -> str | None:
    return (inspector_for(backend).job(job_id) or {}).get("st")


@stores
def test_errors_grouped_and_retried_per_group(dashboard: Site, browser: Browser) -> None:
    site = dashboard
    smtp = [dead_letter(site, "ConnectionError", f"SMTP down\nattempt {n}") for n in range(3)]
    card = dead_letter(site, "ValueError", "card declined")
    browser.open(site.operator_url + "/")
    browser.click("#nav-errors")
    rows = [r.text for r in browser.find_all("#groups tr")][1:]
    assert rows[0].startswith("3 ConnectionError SMTP down") and "card declined" in rows[1]
    browser.click("a#group-1")
    assert sorted(browser.job_links()) == sorted(smtp)
    assert browser.find("#group-total").text == "3"
    browser.click("button#group-retry-this")
    assert "Retry all 3 dead letters of ConnectionError: SMTP down?" in browser.text()
    assert all(state(site.backend, j) == "failed" for j in smtp)  # nothing before confirming
    browser.click("button#confirm")
    assert browser.find("#msg").text.startswith("retried 3 of 3 dead letters")
    assert all(state(site.backend, j) == "enqueued" for j in smtp)
    assert state(site.backend, card) == "failed"
    rows = [r.text for r in browser.find_all("#groups tr")][1:]
    assert len(rows) == 1 and "card declined" in rows[0]
    browser.screenshot("dashboard-errors.png")


@stores
def test_select_all_on_a_page_and_act_on_every_match(dashboard: Site, browser: Browser) -> None:
    site = dashboard
    smtp = [dead_letter(site, "ConnectionError", "SMTP down") for _ in range(5)]
    card = dead_letter(site, "ValueError", "card declined")
    browser.open(site.operator_url + "/jobs/failed?text=SMTP&per_page=2")
    assert not [b for b in browser.find_all("input[type=checkbox]") if b.is_selected()]
    browser.click("a#select-all")
    boxes = browser.find_all("input[type=checkbox]")
    assert len(boxes) == 2 and all(b.is_selected() for b in boxes)
    picked = browser.job_links()
    browser.click("button#bulk-discard-selected")
    assert "Discard the 2 selected failed jobs?" in browser.text()
    browser.click("button#confirm")
    assert browser.find("#msg").text == "discarded 2 of 2 selected failed jobs"
    assert {state(site.backend, j) for j in picked} == {"discarded"}
    # every match of the text filter, not only the page on screen
    browser.click("button#bulk-retry-scope")
    assert "Retry all 3 failed jobs of this filter (text 'SMTP')?" in browser.text()
    browser.click("button#confirm")
    assert browser.find("#msg").text == "retried 3 of 3 matching failed jobs"
    rest = [j for j in smtp if j not in picked]
    assert {state(site.backend, j) for j in rest} == {"enqueued"}
    assert state(site.backend, card) == "failed"
    # and cancel every waiting job of a filter: the three just retried
    browser.open(site.operator_url + "/jobs/enqueued?task=proj.fail")
    browser.click("button#bulk-cancel-scope")
    assert "Cancel all 3 enqueued jobs of this filter (task proj.fail)?" in browser.text()
    browser.click("button#confirm")
    assert browser.find("#msg").text == "canceled 3 of 3 matching enqueued jobs"
    assert {state(site.backend, j) for j in rest} == {"canceled"}


@stores
def test_the_per_task_breakdown_of_jobs_a_worker_ran(
        dashboard: Site, browser: Browser, start_worker: Callable[..., Worker]) -> None:
    site = dashboard
    start_worker()
    done = [site.app.send_task("proj.add", args=[n, n]) for n in range(3)]
    failed = site.app.send_task("proj.fail", args=["no"])
    ids = [str(r.id) for r in (*done, failed)]
    wait_until(lambda: [state(site.backend, i) for i in ids]
               == ["completed"] * 3 + ["failed"], timeout=60, message="the worker ran them")
    browser.open(site.operator_url + "/")
    browser.click("#nav-tasks")
    rows = {r.text.split()[0]: r.text.split()[1:] for r in browser.find_all("#tasks tr")[1:]}
    # waiting running succeeded failed dead rate p50 p95
    assert rows["proj.add"][:6] == ["0", "0", "3", "0", "0", "0.0%"]
    assert rows["proj.fail"][:6] == ["0", "0", "0", "1", "1", "100.0%"]
    assert rows["proj.add"][6] != "-"  # a runtime, from the worker's start and finish
    browser.click("a#window-15m")
    assert "the last 15m" in browser.text()
    browser.screenshot("dashboard-tasks.png")
