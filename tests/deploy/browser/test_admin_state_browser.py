"""The admin-state features of issue 28 in a real browser (headless Chromium, Selenium), with
a real ``celery-plus worker``, on each store (the README suite runs each test on one of them:
``tests/deploy/matrix.py``; docs/admin.md).

* **Reserved and running**: a solo worker claims two jobs at once; while the first runs, the
  second waits in the worker (prefetched). The running listing marks it ``reserved`` and its
  page says so; once it ran, its runtime counts from its real start, not from its claim.
* **Workers by Celery name, with health**: the workers page lists the worker by its node name
  (``w0-…@host``), alive, with its pid and queues, from the store — no remote-control
  broadcast on load; *ask the workers now* sends exactly one. ``/metrics`` has its
  ``celery_plus_worker_up`` series by that name.
* **Limits in use**: ``/limits`` shows per key a full concurrency group (running of limit,
  one blocked) and a full rate window (starts of limit, one parked); the blocked listing marks
  the parked job *rate limit* and the other *concurrency*; ``/metrics`` keeps the customer id
  out of its labels.

The README suite runs the cheap variants (the store written by the test as a worker would:
its heartbeat's start marks, its record); the real-worker ones are ``long``
(``tests/run_long.sh``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import pytest

from celery_plus import admin
from tests.deploy.browser.conftest import Browser, Site
from tests.deploy.e2e.conftest import Worker
from tests.deploy.matrix import pools
from tests.support import wait_until

STORES = ("redis", "sqlite", "postgres")
#: A short heartbeat: the store learns a job is reserved (or started) within it.
FAST_BEAT = {"PLUS_TEST_HEARTBEAT": "0.3"}


class CountingControl:
    """The app's remote control, counting its broadcasts (``inspect`` calls)."""

    def __init__(self, control: Any) -> None:
        self.control = control
        self.inspects = 0

    def inspect(self, *args: Any, **kwargs: Any) -> Any:
        self.inspects += 1
        return self.control.inspect(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.control, name)


def _reserved(site: Site, job_id: str) -> bool:
    return admin.show(site.app, job_id).summary.reserved


@pytest.mark.long  # a real worker and a 6 s task (~16 s): tests/run_long.sh
@pools("solo", "prefork")
@pytest.mark.parametrize("broker_kind", STORES, indirect=True)
def test_a_prefetched_job_shows_reserved_and_its_runtime_starts_when_it_does(
        dashboard: Site, browser: Browser, start_worker: Callable[..., Worker],
        pool: str) -> None:
    site = dashboard
    # 6 s: the reserved mark (a heartbeat), the listing and the job's page must all come
    # while it runs (with 2.5 s the quick job had completed by then at load 12)
    slow = site.app.tasks["proj.sleep_mark"].delay(1, 6)
    quick = site.app.tasks["proj.mark"].delay(2)
    # one process: it claims both at once and runs the slow one first (a prefork worker
    # learns each start from its pool process, in its main process: Request.on_accepted)
    start_worker(env=FAST_BEAT, pool=pool, concurrency=1)
    wait_until(lambda: _reserved(site, str(quick.id)), timeout=30,
               message="the prefetched job is marked reserved")
    browser.open(site.operator_url + "/jobs/running")
    rows = {r.find_element("css selector", "a").text: r.text
            for r in browser.find_all("table#jobs tr")[1:]}
    assert "reserved" in rows[str(quick.id)], rows
    assert "reserved" not in rows[str(slow.id)], rows
    browser.open(site.operator_url + f"/job/{quick.id}")
    assert browser.fact("state") == "reserved"
    assert browser.fact("runtime").startswith("reserved (not started) for")
    browser.screenshot("reserved-job.png")

    assert quick.get(timeout=30) == 2
    wait_until(lambda: admin.show(site.app, str(quick.id)).state == "completed", timeout=30,
               message="the quick job is completed in the store")
    done = admin.show(site.app, str(quick.id))
    assert done.started_ms is not None and done.finished_ms is not None
    assert done.started_ms - done.summary.enqueued_ms >= 1500, "its wait ended at its claim"
    assert done.finished_ms - done.started_ms < 1500, "its runtime counts the prefetch wait"
    browser.open(site.operator_url + f"/job/{quick.id}")
    assert browser.fact("state") == "completed"


@pytest.mark.long  # a real worker (~12 s): tests/run_long.sh
@pytest.mark.parametrize("broker_kind", STORES, indirect=True)
def test_the_workers_page_names_workers_by_celery_name_with_health_and_no_broadcast(
        dashboard: Site, browser: Browser, start_worker: Callable[..., Worker],
        prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    site = dashboard
    worker = start_worker(env=FAST_BEAT)
    node = f"w0-{prefix}@{os.uname().nodename}"
    wait_until(lambda: any(v.node == node for v in admin.list_workers(site.app)), timeout=30,
               message="the worker's record is in the store")
    counting = CountingControl(site.app.control)
    monkeypatch.setattr(type(site.app), "control", property(lambda app: counting))
    started = time.monotonic()
    browser.open(site.operator_url + "/workers")
    took = time.monotonic() - started
    cells = {r.find_elements("css selector", "td")[0].text:
             [c.text for c in r.find_elements("css selector", "td")]
             for r in browser.find_all("table#workers tr")[1:]}
    row = cells[node]  # worker, health, host, pid, up since, last heartbeat, jobs, queues
    assert row[1] == "alive" and row[3] == str(worker.proc.pid) and row[7] == "celery", row
    assert counting.inspects == 0, "the page broadcast to the workers"
    assert took < 1.0, f"the workers page took {took:.2f} s"
    browser.screenshot("workers-by-name.png")
    browser.click("#ask-workers")
    assert counting.inspects == 1
    asked = [c.text for c in browser.find(f"[id='health-{node}']").find_elements(
        "xpath", "../../td")]
    assert asked[8] == "yes", asked
    browser.open(site.operator_url + "/metrics")
    assert f'celery_plus_worker_up{{worker="{node}"}} 1.0' in browser.text().splitlines()


@pytest.mark.parametrize("broker_kind", STORES, indirect=True)
def test_limits_in_use_per_key_and_rate_limited_jobs_apart(dashboard: Site,
                                                           browser: Browser) -> None:
    from tests.fast.unit.test_admin_cli import Store
    from tests.fast.unit.test_admin_state_cli import _limited_jobs

    site = dashboard
    ids = _limited_jobs(Store(site.app, site.backend))
    browser.open(site.operator_url + "/")
    browser.click("#nav-limits")
    report = [[c.text for c in r.find_elements("css selector", "td")]
              for r in browser.find_all("table[id='limits-concurrency-proj.report'] tr")[1:]]
    assert report == [["42", "1 running of 1", "full", "1 blocked"],
                      ["43", "1 running of 1", "full", "0"]], report
    [acme] = [[c.text for c in r.find_elements("css selector", "td")]
              for r in browser.find_all("table[id='limits-rate-proj.send'] tr")[1:]]
    assert acme[0] == '"acme"' and acme[1].startswith("1 starts in ") and acme[1].endswith(
        " of 1") and acme[2:] == ["full", "1 parked (window full)"], acme
    browser.screenshot("limits.png")
    browser.open(site.operator_url + "/jobs/blocked")
    rows = {r.find_element("css selector", "a").text: r.text
            for r in browser.find_all("table#jobs tr")[1:]}
    assert "rate limit" in rows[ids["parked"]] and "concurrency" in rows[ids["blocked"]], rows
    browser.open(site.operator_url + "/metrics")
    lines = browser.text().splitlines()
    assert 'celery_plus_group_running{group="proj.report:*"} 2.0' in lines
    assert 'celery_plus_rate_limit_parked{group="proj.send:*"} 1.0' in lines
    assert not [line for line in lines if "acme" in line or 'report:42"' in line]


@pytest.mark.parametrize("broker_kind", STORES, indirect=True)
def test_reserved_and_running_on_the_pages_cheap(dashboard: Site, browser: Browser) -> None:
    """The README suite's variant: the claims and start marks a worker's heartbeat sends."""
    from celery_plus.model.store import NOT_STARTED

    site = dashboard
    waiting, started = (str(site.app.tasks["proj.mark"].delay(n).id) for n in (1, 2))
    got = {c.job_id: c for c in site.backend.claim(["celery"], "h:1:x", 2).claims}
    site.backend.heartbeat([(waiting, got[waiting].token), (started, got[started].token)],
                           [NOT_STARTED, 0])
    browser.open(site.operator_url + "/jobs/running")
    rows = {r.find_element("css selector", "a").text: r.text
            for r in browser.find_all("table#jobs tr")[1:]}
    assert "reserved" in rows[waiting] and "reserved" not in rows[started], rows
    browser.open(site.operator_url + f"/job/{waiting}")
    assert browser.fact("state") == "reserved"
    browser.open(site.operator_url + f"/job/{started}")
    assert browser.fact("state") == "running"
    # the overview counts them apart: one running, one reserved (in the navigation too)
    browser.open(site.operator_url + "/")
    counts = {tr.find_element("css selector", "a").text: tr.text.split()[-1]
              for tr in browser.find_all("table#counts tr")[1:]}
    assert (counts["running"], counts["reserved"]) == ("1", "1"), counts
    assert browser.find("#nav-reserved").text == "reserved (1)"
    assert browser.find("#nav-running").text == "running (1)"


@pytest.mark.parametrize("broker_kind", STORES, indirect=True)
def test_the_workers_page_cheap(dashboard: Site, browser: Browser,
                                monkeypatch: pytest.MonkeyPatch) -> None:
    """The README suite's variant: a worker's record as its lease keeper writes it."""
    from celery_plus.model.store import WorkerBeat

    site = dashboard
    site.backend.worker_beat(WorkerBeat(node="w9@host-9", host="host-9", pid=999,
                                        queues=("celery",), interval_ms=60_000))
    counting = CountingControl(site.app.control)
    monkeypatch.setattr(type(site.app), "control", property(lambda app: counting))
    browser.open(site.operator_url + "/workers")
    row = [c.text for c in browser.find("[id='health-w9@host-9']").find_elements(
        "xpath", "../../td")]
    assert row[:4] == ["w9@host-9", "alive", "host-9", "999"] and row[7] == "celery", row
    assert counting.inspects == 0, "the page broadcast to the workers"
