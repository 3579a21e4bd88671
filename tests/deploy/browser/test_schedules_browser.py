"""Beat's schedules in the web dashboard, in a real browser (headless Chromium, Selenium).

A real ``celery-plus beat`` (:mod:`tests.deploy.e2e.periodic_proj`, a 1 s entry ``tick``) fires
into the
test's store; the operator opens the schedules page from the navigation, sees the entry and its
fired ticks, presses pause — no job is enqueued for its ticks while paused — and resume — the
ticks are enqueued again. Screenshots
go to ``<tmp>/artifacts/``; with ``CELERY_PLUS_DOC_IMAGES=1`` one is copied to ``docs/img/``
(shown in docs/schedules.md).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.deploy.browser.conftest import Browser, Site
from tests.deploy.e2e.periodic_checks import Beat
from tests.inspectors import inspector_for
from tests.support import wait_until

DOCS_IMG = Path(__file__).resolve().parents[3] / "docs" / "img"


@pytest.fixture
def beat(tmp_path: Path, prefix: str) -> Iterator[Beat]:
    process = Beat(tmp_path / "beat.log", {"PLUS_TEST_PREFIX": prefix,
                                           "PLUS_TEST_BEAT_EVERY": "1"})
    yield process
    process.stop()


def fired(site: Site) -> int:
    return next((s.fired for s in site.backend.schedules() if s.name == "tick"), 0)


def test_an_operator_pauses_and_resumes_a_schedule(dashboard: Site, browser: Browser,
                                                   beat: Beat) -> None:
    site = dashboard
    wait_until(lambda: fired(site) >= 2, timeout=60, message="beat fires ticks")

    browser.open(site.operator_url + "/")
    browser.click("a#nav-schedules")
    row = browser.find("#schedules tr:nth-child(2)").text
    assert "tick" in row and "periodic.tick" in row and "active" in row
    shot = browser.screenshot("schedules.png")

    browser.click("button#pause-tick")
    assert browser.find("#msg").text == "paused tick"
    assert "paused" in browser.find("#schedules tr:nth-child(2)").text
    assert browser.find_all("button#resume-tick")
    paused_at = fired(site)
    waiting = len(inspector_for(site.backend).ids_in_state("enqueued"))
    time.sleep(2.5)  # two ticks fall due while paused
    assert fired(site) == paused_at
    assert len(inspector_for(site.backend).ids_in_state("enqueued")) == waiting

    browser.click("button#resume-tick")
    assert browser.find("#msg").text == "resumed tick"
    wait_until(lambda: fired(site) >= paused_at + 2, timeout=30,
               message="ticks enqueued again after the resume")
    browser.open(site.operator_url + "/schedules")
    assert "active" in browser.find("#schedules tr:nth-child(2)").text

    if os.environ.get("CELERY_PLUS_DOC_IMAGES") == "1":
        DOCS_IMG.mkdir(exist_ok=True)
        shutil.copy(shot, DOCS_IMG / "dashboard-schedules.png")
