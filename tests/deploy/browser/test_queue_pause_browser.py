"""Pausing and resuming a queue on the dashboard, in a real browser (headless Chromium,
Selenium), with a real ``celery-plus worker`` consuming it (issue #28; docs/admin.md,
"Pausing a queue").

The operator opens the overview, presses *pause* on the queue's row: the page says so and the
row shows the queue paused; a job published meanwhile stays enqueued (the worker claims
nothing of it); *resume* and the worker runs it. Screenshots go to ``<tmp>/artifacts/``.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from tests.deploy.browser.conftest import Browser, Site
from tests.deploy.e2e.conftest import Worker
from tests.deploy.e2e.proj import events
from tests.inspectors import inspector_for
from tests.support import wait_until


def marked(prefix: str, n: int) -> bool:
    return any(e["n"] == n for e in events(prefix, "mark"))


def queue_row(browser: Browser, queue: str) -> str:
    rows = [r.text for r in browser.find_all("#queues tr") if r.text.split()[:1] == [queue]]
    assert len(rows) == 1, rows
    return str(rows[0])


def test_an_operator_pauses_and_resumes_a_queue_a_worker_consumes(
        dashboard: Site, browser: Browser, start_worker: Callable[..., Worker],
        prefix: str) -> None:
    site = dashboard
    start_worker()
    mark = site.app.tasks["proj.mark"]
    mark.delay(1)
    wait_until(lambda: marked(prefix, 1), timeout=60, message="the worker runs a job")

    browser.open(site.operator_url + "/")
    assert "active" in queue_row(browser, "celery")
    browser.click("button#pause-queue-celery")
    assert browser.find("#msg").text.startswith("paused queue celery")
    assert "paused since" in queue_row(browser, "celery")
    assert browser.find_all("button#resume-queue-celery")
    browser.screenshot("queue-paused.png")

    job_id = str(mark.delay(2).id)
    time.sleep(1.0)  # the paused window itself: the idle worker takes nothing from the queue
    assert (inspector_for(site.backend).job(job_id) or {}).get("st") == "enqueued"
    assert not marked(prefix, 2)
    browser.open(site.operator_url + "/")
    assert "paused since" in queue_row(browser, "celery")

    browser.click("button#resume-queue-celery")
    assert browser.find("#msg").text == "resumed queue celery"
    wait_until(lambda: marked(prefix, 2), timeout=30, message="the job runs after the resume")
    assert "active" in queue_row(browser, "celery")
    assert site.backend.paused_queues() == {}
