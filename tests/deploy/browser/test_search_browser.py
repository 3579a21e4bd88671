"""The jobs pages' search box in a real browser (headless Chromium), on every store.

Issue #28: an operator finds a waiting job by its task id and by part of its task name, and a
dead letter by part of its error, by typing into the search box and pressing enter. The jobs
are the app's own messages (``send_task``) on a queue no worker consumes; the dead letter is
claimed and failed as a worker would (``store_dead_letter``).
"""

from __future__ import annotations

import pytest

from tests.deploy.browser.conftest import Browser, Site
from tests.deploy.browser.test_dashboard_browser import store_dead_letter


def search(browser: Browser, text: str) -> list[str]:
    """Type ``text`` into the search box, press enter: the task ids listed."""
    box = browser.find("#filter input[name='text']")
    box.clear()
    box.send_keys(text)
    browser.click("#filter button")
    return browser.job_links()


@pytest.mark.parametrize("broker_kind", ["redis", "sqlite", "postgres"], indirect=True)
def test_an_operator_finds_jobs_by_id_by_part_of_a_task_name_and_by_error(
        dashboard: Site, browser: Browser, broker_kind: str) -> None:
    site = dashboard
    dead = store_dead_letter(site, "proj.send_invoice", [7], "SMTP server unreachable")
    first, second, report = (
        str(site.app.send_task(name, args=[n], queue="idle").id)
        for n, name in enumerate(["proj.send_invoice", "proj.send_invoice",
                                  "proj.rebuild_report"]))
    browser.open(site.operator_url + "/jobs/enqueued")
    # Newest first; jobs published within one millisecond may tie: compared as sets.
    assert sorted(browser.job_links()) == sorted([report, second, first])
    placeholder = browser.find("#filter input[name='text']").get_attribute("placeholder")
    assert "task id" in placeholder and "task name" in placeholder
    assert search(browser, second) == [second]                     # the whole task id
    assert search(browser, first[4:16]) == [first]                 # part of it
    assert search(browser, "REBUILD_REP") == [report]              # part of a task name
    assert sorted(search(browser, "send_inv")) == sorted([second, first])
    assert "3 jobs" not in browser.text() and "2 jobs" in browser.text()
    assert search(browser, "no-such-job") == []
    browser.open(site.operator_url + "/jobs/failed")
    assert search(browser, "smtp serv") == [dead]                  # the error text
    assert search(browser, dead[-12:]) == [dead]
