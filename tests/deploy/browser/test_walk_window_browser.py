"""The walk's window on the dashboard, in a real browser (headless Chromium, Selenium), on Redis
(issue #28; docs/admin.md, "Listings" and "Cost").

Redis has no index of waiting jobs by task or time: past ``ORDERED_MAX`` waiting jobs a task or
time filter walks the queue indexes, looking at the first ``pages.WALK_LIMIT`` jobs of the
listing's order only. Both are set small here (the dashboard serves in this process), so a
handful of jobs is "many". The operator filters by a task whose only job is beyond the window:
the page lists nothing, says it looked at the first 3 of the 7 jobs only, and links to "walk
them all" (``walk=all``); following it lists the job. A time filter matching only that job
does the same. No worker runs: the jobs stay enqueued.

The same window stands in for the listing index of dead letters that a store an earlier
release wrote lacks, until it is built; the page says so.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from celery_plus import admin
from celery_plus.admin import pages
from celery_plus.stores.redis import admin as redis_admin
from celery_plus.stores.redis import listing_index
from tests.deploy.browser.conftest import Browser, Site
from tests.fast.conformance.test_admin import dead
from tests.support import wait_until

WINDOW = 3


@pytest.mark.parametrize("broker_kind", ["redis"], indirect=True)
def test_a_filter_beyond_the_walk_window_says_so_and_walk_all_lists_the_rest(
        dashboard: Site, browser: Browser, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redis_admin, "ORDERED_MAX", 4)
    monkeypatch.setattr(pages, "WALK_LIMIT", WINDOW)
    site = dashboard
    rare = site.app.send_task("proj.rare", args=[0])  # the oldest: last, newest first
    enqueued_ms = admin.show(site.app, rare.id).summary.enqueued_ms
    wait_until(lambda: site.backend.now_ms() > enqueued_ms, timeout=5,
               message="the store clock passes the rare job's enqueue time")
    for n in range(6):
        site.app.send_task("proj.add", args=[n, n])

    # A task filter: the window's 3 newest jobs are proj.add's.
    browser.open(site.operator_url + "/jobs/enqueued?task=proj.rare")
    label = browser.find("#walked").text
    assert f"listed among the first {WINDOW} of the 7 enqueued jobs only" in label, label
    assert browser.job_links() == []
    browser.click("#walked a[href*='walk=all']")
    assert "walk=all" in browser.driver.current_url
    assert browser.job_links() == [rare.id]
    assert browser.find_all("#walked") == []

    # A time filter: the jobs enqueued up to the rare one's millisecond.
    until = dt.datetime.fromtimestamp(enqueued_ms / 1000, dt.timezone.utc)
    browser.open(site.operator_url + "/jobs/enqueued?until="
                 + until.replace(tzinfo=None).isoformat(timespec="milliseconds"))
    assert browser.find("#walked").text.startswith(f"listed among the first {WINDOW} ")
    assert browser.job_links() == []
    browser.click("#walked a[href*='walk=all']")
    assert browser.job_links() == [rare.id] and browser.find_all("#walked") == []


@pytest.mark.parametrize("broker_kind", ["redis"], indirect=True)
def test_dead_letters_of_an_old_store_are_walked_and_said_so_while_their_index_is_built(
        dashboard: Site, browser: Browser, monkeypatch: pytest.MonkeyPatch) -> None:
    """A store an earlier release wrote: its dead letters have no listing index. A task
    filter reads a bounded part of them into it and walks the newest WINDOW + 1, saying the
    index is still being built; the overview says its per-queue counts leave some out."""
    monkeypatch.setattr(listing_index, "SYNC_BATCH", 2)
    monkeypatch.setattr(pages, "WALK_LIMIT", WINDOW + 1)
    site = dashboard
    backend: Any = site.backend
    for n in range(8):  # d0 (oldest) .. d7; proj.rare: d0, d4
        dead(backend, f"d{n}", task="proj.rare" if n % 4 == 0 else "proj.mail")
    backend.client.delete(*backend.client.keys(f"{backend.prefix}:ax:*"))

    browser.open(site.operator_url + "/jobs/failed?task=proj.rare")
    label = browser.find("#walked").text
    assert f"listed among the first {WINDOW + 1} of the 8 failed jobs only" in label, label
    assert "still being built" in label
    assert browser.job_links() == ["d4"]
    browser.click("#walked a[href*='walk=all']")
    assert browser.job_links() == ["d4", "d0"] and browser.find_all("#walked") == []
    browser.open(site.operator_url + "/")
    assert "dead letters are not in the per-queue counts yet" in browser.find("#unindexed").text
