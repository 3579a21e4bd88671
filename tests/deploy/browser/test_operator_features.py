"""Issue 14, acceptance 3: the operator features, driven in headless Chromium with real
``celery-plus worker`` processes (prefork, two processes each) on every store.

Per store (Redis, SQLite, PostgreSQL) one deployment is shared by the tests below: the app
(``tests.deploy.e2e.proj`` with ``plus_admin_token``), two workers, the dashboard served by
waitress,
one Chromium. Each test makes the jobs it looks at, so they run in any order. Every step is
a page load, a click or a form as an operator does it:

* live refresh (``<meta refresh>``: no script under the CSP) and counts in the navigation;
* the worker list (store leases and heartbeats + remote control), "stop taking work"
  (``cancel_consumer``) and shutdown (warm);
* the completed / failed chart (server-rendered SVG) and its time ranges, throughput, per-queue
  latency (and the oldest waiting job of a queue nobody consumes);
* page numbers, oldest-first order, a time range (since, then until);
* queue depth and wait over time (``/history``: a worker's maintenance turn records the
  samples; the charts of one queue and their ranges);
* stopping a running job (``revoke(terminate=True)``);
* a job's result and runtime.

With ``CELERY_PLUS_DOC_IMAGES=1`` the Redis run copies its screenshots to ``docs/img/``.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
import shutil
import sqlite3
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import pytest
import redis

from celery_plus import Celery
from celery_plus.model.options import StoreOptions
from celery_plus.model.store import Backend
from celery_plus.stores.admin_base.queue_history import decode, encode
from celery_plus.stores.postgres.backend import PostgresBackend
from celery_plus.stores.redis.backend import RedisBackend
from celery_plus.stores.registry import admin_for
from celery_plus.stores.sqlite.backend import SQLiteBackend
from tests.deploy.browser.conftest import ADMIN_TOKEN, Browser, Served, launch
from tests.deploy.e2e import proj
from tests.deploy.e2e.conftest import CELERY_PLUS, ROOT, Worker
from tests.deploy.e2e.proj import REDIS_URL, events
from tests.fast.conformance.stores import PG_URL
from tests.inspectors import inspector_for
from tests.support import drop_pg_schema, wait_until

DOCS_IMG = Path(__file__).resolve().parents[3] / "docs" / "img"
STORES = [pytest.param(kind, marks=pytest.mark.xdist_group(f"admin-features-{kind}"))
          for kind in ("redis", "sqlite", "postgres")]


@dataclass
class Deployment:
    """One store's app, workers and dashboard."""

    kind: str
    prefix: str
    broker: str
    app: Celery
    view: Backend
    url: str
    operator_url: str
    tmp: Path
    workers: list[Worker] = field(default_factory=list)

    def start_worker(self, concurrency: int = 2) -> Worker:
        n = len(self.workers)
        log = self.tmp / f"worker-{n}.log"
        command = [*CELERY_PLUS, "-A", "tests.deploy.e2e.proj", "worker", "--pool=prefork",
                   f"--concurrency={concurrency}", "--loglevel=INFO", "--without-gossip",
                   "--without-mingle", f"--hostname={self.node(n)}"]
        env = {**os.environ, "PLUS_TEST_PREFIX": self.prefix, "PLUS_TEST_BROKER": self.broker}
        with open(log, "wb") as out:
            proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True)
        worker = Worker(proc, log)
        self.workers.append(worker)
        wait_until(lambda: " ready." in worker.log() or proc.poll() is not None, timeout=60,
                   message="worker ready")
        assert proc.poll() is None, worker.log()
        return worker

    def node(self, n: int) -> str:
        return f"w{n}-{self.prefix}@{os.uname().nodename}"

    def state(self, job_id: str) -> str | None:
        return (inspector_for(self.view).job(job_id) or {}).get("st")

    def wait_state(self, job_id: str, *states: str, timeout: float = 60) -> str:
        wait_until(lambda: self.state(job_id) in states, timeout=timeout,
                   message=f"{job_id} becomes {' or '.join(states)}")
        return str(self.state(job_id))

    def screenshot(self, browser: Browser, name: str) -> None:
        path = browser.screenshot(f"{self.kind}-{name}")
        if self.kind == "redis" and os.environ.get("CELERY_PLUS_DOC_IMAGES") == "1":
            DOCS_IMG.mkdir(exist_ok=True)
            shutil.copy(path, DOCS_IMG / f"dashboard-{name}")


def _view(kind: str, broker: str, prefix: str) -> Backend:
    url = broker.removeprefix("plus+")
    if kind == "sqlite":
        return SQLiteBackend(url, StoreOptions(prefix=prefix))
    if kind == "postgres":
        return PostgresBackend(url, schema=proj.pg_schema(prefix))
    return RedisBackend(url, StoreOptions(prefix=prefix))


@pytest.fixture(scope="module", params=STORES)
def deployment(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
               ) -> Iterator[Deployment]:
    kind = request.param
    tmp = tmp_path_factory.mktemp(f"features-{kind}")
    prefix = f"t{uuid.uuid4().hex[:10]}"
    broker = {"redis": f"plus+{REDIS_URL}", "sqlite": f"plus+sqlite:///{tmp / 'broker.db'}",
              "postgres": f"plus+{PG_URL}"}[kind]
    with pytest.MonkeyPatch.context() as env:
        env.setenv("PLUS_TEST_BROKER", broker)
        # A small producer pool: every kombu connection to plus+postgresql:// is a pool of
        # its own, and the shared PostgreSQL server has 100 connections for every test.
        app = proj.make_app(prefix, plus_admin_token=ADMIN_TOKEN, broker_pool_limit=2)
    view = _view(kind, broker, prefix)
    served = Served(app)
    dep = Deployment(kind, prefix, broker, app, view, f"http://127.0.0.1:{served.port}",
                     f"http://operator:{ADMIN_TOKEN}@127.0.0.1:{served.port}", tmp)
    try:
        dep.start_worker()
        dep.start_worker()
        yield dep
    finally:
        for worker in dep.workers:
            worker.terminate()
        for worker in dep.workers:
            worker.stop()
        served.stop()
        view.close()
        app.close()
        client = redis.Redis.from_url(REDIS_URL)
        for key in list(client.scan_iter(f"{prefix}:*", count=1000)):
            client.delete(key)
        client.close()
        if kind == "postgres":
            drop_pg_schema(PG_URL, proj.pg_schema(prefix))


@pytest.fixture(scope="module")
def chromium(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    tmp = tmp_path_factory.mktemp("chromium")
    browser = launch(tmp / "profile", tmp / "artifacts")
    try:
        yield browser
    finally:
        browser.driver.quit()


def rows(browser: Browser, table: str) -> list[list[str]]:
    """The cells' text of a table's rows (without the header)."""
    from selenium.webdriver.common.by import By

    out = []
    for tr in browser.find_all(f"table#{table} tr")[1:]:
        out.append([td.text for td in tr.find_elements(By.TAG_NAME, "td")])
    return out


def nav_count(browser: Browser, state: str) -> int | None:
    """The count the navigation shows for ``state`` (None mid-reload)."""
    from selenium.common.exceptions import WebDriverException

    try:
        text = browser.find(f"#nav-{state}").text
    except WebDriverException:
        return None
    match = re.search(r"\(([\d,]+)\)", text)
    return int(match.group(1).replace(",", "")) if match else None


# -- live refresh, counts in the navigation ------------------------------------------------
def test_live_refresh_and_counts_in_the_navigation(deployment: Deployment,
                                                   chromium: Browser) -> None:
    dep, browser = deployment, chromium
    browser.open(dep.operator_url + "/")
    browser.click("#live-5")
    assert "refresh=5" in browser.driver.current_url
    assert browser.find_all("meta[http-equiv='refresh']")
    before = nav_count(browser, "failed")
    assert before is not None
    job_id = str(dep.app.tasks["proj.fail"].delay("live refresh").id)
    dep.wait_state(job_id, "failed")
    # no click, no reload by the test: the page reloads itself under its no-script CSP
    wait_until(lambda: nav_count(browser, "failed") == before + 1, timeout=60, interval=0.5,
               message="the live page shows the new dead letter")
    browser.click("#live-0")
    assert "refresh" not in browser.driver.current_url
    assert not browser.find_all("meta[http-equiv='refresh']")


# -- workers ----------------------------------------------------------------------------------
def _worker_rows(browser: Browser) -> dict[str, list[str]]:
    return {row[0]: row for row in rows(browser, "workers")}


def test_the_worker_list_and_stop_taking_work(deployment: Deployment, chromium: Browser) -> None:
    dep, browser = deployment, chromium
    first, second = dep.node(0), dep.node(1)
    busy = str(dep.app.tasks["proj.sleep_mark"].delay(9001, 12).id)
    dep.wait_state(busy, "running")
    holder_pid = int((inspector_for(dep.view).job(busy) or {})["wk"].split(":")[1])
    browser.open(dep.operator_url + "/workers")
    listed = _worker_rows(browser)
    assert {first, second} <= set(listed)
    pids = {dep.workers[0].proc.pid: first, dep.workers[1].proc.pid: second}
    for pid, node in pids.items():  # columns: worker, health, host, pid, up since, beat, ...
        assert listed[node][1] == "alive" and listed[node][3] == str(pid)
        assert listed[node][7] == "celery"
    holder = listed[pids[holder_pid]]
    assert holder[6] == "1" and re.fullmatch(r"\d+s ago", holder[5]), holder
    dep.screenshot(browser, "workers.png")
    # stop the other worker taking work: confirmed first, then cancel_consumer
    idle = first if pids[holder_pid] == second else second
    idle_pid = next(pid for pid, node in pids.items() if node == idle)
    browser.click(f"[id='stop-{idle}']")
    assert f"Stop {idle} taking work?" in browser.find("#question").text
    browser.click("#confirm")
    assert browser.find("#msg").text == f"asked {idle} to stop consuming celery"
    try:
        # its record says so within a heartbeat, and so does its answer when asked
        wait_until(lambda: _reload_rows(browser, dep)[idle][7] == "none (stopped)", timeout=30,
                   message="the stopped worker consumes nothing")
        asked = _reload_rows(browser, dep, ask=True)[idle]
        assert asked[7] == "none (stopped)" and asked[8] == "yes", asked
        jobs = [str(dep.app.tasks["proj.mark"].delay(n).id) for n in range(4)]
        for job_id in jobs:
            dep.wait_state(job_id, "completed")
        served_by = {int((inspector_for(dep.view).job(j) or {})["wk"].split(":")[1]) for j in jobs}
        assert served_by == {holder_pid}, (served_by, idle_pid)
    finally:
        dep.app.control.add_consumer("celery", destination=[idle], reply=True, timeout=5)
        # (stopped rather than waited for: the next test finds the workers idle sooner)
        dep.app.control.revoke(busy, terminate=True)
    dep.wait_state(busy, "completed", "failed", "discarded", "canceled", timeout=60)


def _reload_rows(browser: Browser, dep: Deployment, ask: bool = False
                 ) -> dict[str, list[str]]:
    browser.open(dep.operator_url + "/workers" + ("?ask=1" if ask else ""))
    return _worker_rows(browser)


def test_shutting_down_a_worker(deployment: Deployment, chromium: Browser) -> None:
    dep, browser = deployment, chromium
    extra = dep.start_worker(concurrency=1)
    node = dep.node(len(dep.workers) - 1)
    wait_until(lambda: node in _reload_rows(browser, dep), timeout=30,
               message="the new worker's record is in the store")
    browser.click(f"[id='shutdown-{node}']")
    assert f"Shut down {node}?" in browser.find("#question").text
    browser.click("#confirm")
    assert browser.find("#msg").text == f"asked {node} to shut down (warm)"
    assert extra.proc.wait(timeout=60) == 0  # a warm shutdown exits 0
    assert "Got shutdown from remote" in extra.log()
    wait_until(lambda: _reload_rows(browser, dep)[node][1] in ("late", "gone"), timeout=30,
               message="the stopped worker's record goes stale")


# -- the chart, throughput, latency ----------------------------------------------------------
def test_the_activity_chart_throughput_and_queue_latency(deployment: Deployment,
                                                         chromium: Browser) -> None:
    dep, browser = deployment, chromium
    # a job on a queue no worker consumes: it waits, and its queue says for how long
    idle_queue = f"nobody-{uuid.uuid4().hex[:6]}"
    waiting = str(dep.app.tasks["proj.add"].apply_async((1, 1), queue=idle_queue).id)
    done = [str(dep.app.tasks["proj.add"].delay(n, n).id) for n in range(3)]
    failed = [str(dep.app.tasks["proj.fail"].delay(f"chart {n}").id) for n in range(2)]
    for job_id in done:
        dep.wait_state(job_id, "completed")
    for job_id in failed:
        dep.wait_state(job_id, "failed")
    browser.open(dep.operator_url + "/")
    assert browser.find_all("svg#activity rect.completed")
    assert browser.find_all("svg#activity rect.failed")
    buckets = re.findall(r"(\d+) completed, (\d+) failed", browser.driver.page_source)
    assert sum(int(c) for c, _ in buckets) >= 3 and sum(int(f) for _, f in buckets) >= 2
    [queue] = [row for row in rows(browser, "queues") if row[0] == "celery"]
    # (columns: queue, enqueued, scheduled, blocked, running, reserved, failed, oldest
    # waiting, wait p50, wait p95, started, state)
    assert re.fullmatch(r"\d+\.\d s|\d+m\d+s", queue[8]) and re.fullmatch(
        r"\d+\.\d s|\d+m\d+s", queue[9]), queue
    assert int(queue[10]) >= 5
    [idle] = [row for row in rows(browser, "queues") if row[0] == idle_queue]
    assert idle[1] == "1" and re.fullmatch(r"\d+s", idle[7]) and idle[8] == "-", idle
    assert dep.state(waiting) == "enqueued"
    [five, hour] = rows(browser, "throughput")
    assert int(five[1]) >= 3 and int(five[3]) >= 2 and int(hour[1]) >= 3
    dep.screenshot(browser, "overview.png")
    browser.click("#range-24h")
    assert "range=24h" in browser.driver.current_url
    assert browser.find("svg#activity") and "<b>24h</b>" in browser.driver.page_source
    assert len(browser.find_all("svg#activity g.bucket")) == 96


# -- queue depth and wait over time ------------------------------------------------------------
def _forget_sample(dep: Deployment, bucket: int) -> None:
    """Delete the store's sample of ``bucket`` (as if no worker had taken it yet)."""
    if dep.kind == "redis":
        client = redis.Redis.from_url(REDIS_URL)
        client.hdel(f"{dep.prefix}:qhist", str(bucket))
        client.close()
    elif dep.kind == "sqlite":
        with contextlib.closing(sqlite3.connect(dep.broker.removeprefix("plus+sqlite:///"))
                                ) as db, db:
            db.execute("DELETE FROM queue_history WHERE bucket_ms = ?", (bucket,))
    else:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f"DELETE FROM {proj.pg_schema(dep.prefix)}.queue_history "
                         "WHERE bucket_ms = %s", [bucket])


def test_the_queue_history_chart(deployment: Deployment, chromium: Browser) -> None:
    dep, browser = deployment, chromium
    idle_queue = f"backlog-{uuid.uuid4().hex[:6]}"
    for n in range(3):
        dep.app.tasks["proj.add"].apply_async((n, n), queue=idle_queue)
    history: Any = admin_for(dep.view)
    now = dep.view.now_ms()
    earlier = now - 10 * 60_000  # a sample of ten minutes ago, as a worker would have taken
    history.history_put(earlier - earlier % 60_000, earlier,
                        encode([(idle_queue, 5, earlier - 30_000)]), now - 86_400_000)
    # this minute's sample is taken again by a worker's next maintenance turn (every second)
    bucket = now - now % 60_000
    _forget_sample(dep, bucket)

    def recorded() -> bool:
        rows = history.history_rows(bucket, dep.view.now_ms())
        return any(decode(sample).get(idle_queue, (0, None))[0] == 3 for _, _, sample in rows)

    wait_until(recorded, timeout=30, message="a worker records the backlog's sample")
    browser.open(dep.operator_url + "/")
    browser.click("#history-link")
    browser.click(f"a.queue[href*='{idle_queue}']")
    assert f"queue={idle_queue}" in browser.driver.current_url
    assert len(browser.find_all("svg#depth g.sample rect")) >= 3  # 10 min ago, now, live
    assert len(browser.find_all("svg#wait g.sample rect")) >= 3
    assert "5 jobs enqueued" in browser.driver.page_source
    samples = rows(browser, "history")
    assert samples[0][0].endswith("(now)") and samples[0][1] == "3", samples
    assert samples[1][1] == "3" and samples[-1][1] == "5", samples
    dep.screenshot(browser, "history.png")
    browser.click("#range-6h")
    assert "range=6h" in browser.driver.current_url and "<b>6h</b>" in browser.driver.page_source


# -- listings: page numbers, order, time range -----------------------------------------------
def test_page_numbers_order_and_time_range(deployment: Deployment, chromium: Browser) -> None:
    from selenium.webdriver.support.ui import Select

    dep, browser = deployment, chromium
    marker = f"pager-{uuid.uuid4().hex[:6]}"
    early = [str(dep.app.tasks["proj.fail"].delay(f"{marker} a{n}").id) for n in range(3)]
    for job_id in early:
        dep.wait_state(job_id, "failed")
    since = dt.datetime.fromtimestamp(dep.view.now_ms() / 1000 + 0.001, tz=dt.timezone.utc)
    wait_until(lambda: dep.view.now_ms() > since.timestamp() * 1000 + 5, timeout=5,
               message="the clock moves")
    late = [str(dep.app.tasks["proj.fail"].delay(f"{marker} b{n}").id) for n in range(4)]
    for job_id in late:
        dep.wait_state(job_id, "failed")
    inspect = inspector_for(dep.view)
    by_finish = sorted(early + late, key=lambda j: (int((inspect.job(j) or {})["fin"]), j))
    browser.open(f"{dep.operator_url}/jobs/failed?text={marker}&per_page=2")
    assert "7 jobs, page 1 of 4" in browser.find("#pages").text
    assert browser.job_links() == by_finish[::-1][:2]
    browser.click("#page-4")
    assert browser.job_links() == by_finish[:1]
    assert "page 4 of 4" in browser.find("#pages").text
    dep.screenshot(browser, "pages.png")
    # oldest first, from the filter form
    Select(browser.find("select[name='sort']")).select_by_value("oldest")
    browser.click("#filter button")
    assert browser.job_links() == by_finish[:2]
    # a time range: since the first batch
    field_ = browser.find("input[name='since']")
    field_.clear()
    field_.send_keys(since.strftime("%Y-%m-%dT%H:%M:%S.%f"))
    browser.click("#filter button")
    assert "4 jobs" in browser.find("#pages").text
    assert len(browser.job_links()) == 2 and set(browser.job_links()) <= set(late)
    # ... and until then instead: the first batch only
    for name, value in (("since", ""), ("until", since.strftime("%Y-%m-%dT%H:%M:%S.%f"))):
        field_ = browser.find(f"input[name='{name}']")
        field_.clear()
        field_.send_keys(value)
    browser.click("#filter button")
    assert "3 jobs" in browser.find("#pages").text
    assert set(browser.job_links()) <= set(early) and len(browser.job_links()) == 2


# -- one job: stop it, its result and runtime ------------------------------------------------
def test_stopping_a_running_job(deployment: Deployment, chromium: Browser) -> None:
    dep, browser = deployment, chromium
    n = 7000 + len(dep.kind)
    job_id = str(dep.app.tasks["proj.sleep_mark"].delay(n, 120).id)
    dep.wait_state(job_id, "running")
    wait_until(lambda: any(e["n"] == n for e in events(dep.prefix, "start")), timeout=30,
               message="the task body runs")
    browser.open(f"{dep.operator_url}/job/{quote(job_id)}")
    assert browser.fact("state") == "running"
    assert browser.fact("runtime").startswith("running for")
    browser.click("button#terminate")
    assert "Stop running job" in browser.find("#question").text
    dep.screenshot(browser, "stop-running.png")
    browser.click("#confirm")
    assert browser.find("#msg").text == f"asked the workers to stop {job_id} (revoke, terminate)"
    dep.wait_state(job_id, "completed", "failed", "discarded", "canceled", timeout=60)
    wait_until(lambda: dep.app.AsyncResult(job_id).state == "REVOKED", timeout=30,
               message="the result backend says REVOKED")
    assert not any(e["n"] == n for e in events(dep.prefix, "end"))  # it never finished
    browser.open(f"{dep.operator_url}/job/{quote(job_id)}")
    assert browser.find("#result-state").text == "REVOKED"
    assert not browser.find_all("button#terminate")


def test_a_jobs_result_and_runtime(deployment: Deployment, chromium: Browser) -> None:
    dep, browser = deployment, chromium
    result = dep.app.tasks["proj.add"].delay(20, 22)
    assert result.get(timeout=60) == 42
    dep.wait_state(str(result.id), "completed")
    browser.open(f"{dep.operator_url}/job/{result.id}")
    assert browser.fact("state") == "completed"
    assert re.fullmatch(r"\d+\.\d s", browser.fact("runtime")), browser.fact("runtime")
    assert browser.find("#result-state").text == "SUCCESS"
    assert browser.find("pre#result").text == "42"
    dep.screenshot(browser, "job.png")
