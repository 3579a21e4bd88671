"""Search on the dashboard, in a real browser (headless Chromium, Selenium), on every store
(issue #28; docs/admin.md, "Search").

The operator types a job's id into the listing's text box: the page shows that job alone and
says it is the job with this id. Then part of a task name, any case: the page lists the
matching task names (of the jobs it looked at and of the app's tasks), each a link to the same
search within that task, and the jobs of that task; the link opens that task's jobs only. No
worker runs: the jobs stay enqueued.
"""

from __future__ import annotations

import pytest

from tests.deploy.browser.conftest import Browser, Site


def search(browser: Browser, text: str) -> None:
    box = browser.find("#filter input[name='text']")
    box.clear()
    box.send_keys(text)
    browser.click("#filter button")


#: Every store (the README's suite runs one of them: tests/deploy/matrix.py).
@pytest.mark.parametrize("broker_kind", ["redis", "sqlite", "postgres"], indirect=True)
def test_an_operator_finds_a_job_by_id_and_by_part_of_a_task_name(
        dashboard: Site, browser: Browser) -> None:
    site = dashboard
    mark = site.app.send_task("proj.mark", args=[1])
    other = site.app.send_task("proj.add", args=[2, 3])
    browser.open(site.operator_url + "/jobs/enqueued")
    assert set(browser.job_links()) == {mark.id, other.id}

    search(browser, other.id)
    assert browser.job_links() == [other.id]
    assert browser.find("#by-id").text == "the job with this id"

    search(browser, "MAR")
    assert browser.job_links() == [mark.id]
    # The app's registered tasks count too (proj.sleep_mark, proj.tx_mark ...).
    names = browser.find("#task-names").text
    assert names.startswith("tasks whose name contains it: ") and "proj.mark" in names.split()
    assert "proj.add" not in names
    browser.click("#task-names a[href$='task=proj.mark']")
    assert browser.job_links() == [mark.id]
    assert "task=proj.mark" in browser.driver.current_url
