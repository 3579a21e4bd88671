"""The web dashboard in a real browser (headless Chromium, Selenium) on real data.

Issue 5, acceptance 3: list dead letters, open one, retry it and see it complete (a real
``celery-plus worker`` runs the retried job); an unauthenticated POST is refused and changes
nothing; a job argument containing ``<script>`` renders inert. Plus one bulk path: tick rows,
press a bulk button, confirm. Every step is a click, a tick or a page load in Chromium.
Screenshots go to ``<tmp>/artifacts/``; with ``CELERY_PLUS_DOC_IMAGES=1`` two of them are also
copied to ``docs/img/`` (shown in docs/admin.md).

The store is ``plus+redis://`` on the test's key prefix (the end-to-end harness), with Celery's
Redis result backend. ``proj.fail_until_fixed`` fails (a real dead letter: exception,
traceback) until the test sets its "fixed" flag in Redis.
"""

from __future__ import annotations

import base64
import os
import re
import shutil
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import redis

from celery_plus.model.store import Settle
from tests.deploy.browser.conftest import ADMIN_TOKEN, Browser, Site
from tests.deploy.e2e.conftest import Worker
from tests.deploy.e2e.proj import REDIS_URL, events
from tests.inspectors import inspector_for
from tests.support import wait_until

DOCS_IMG = Path(__file__).resolve().parents[3] / "docs" / "img"
TASK = "proj.fail_until_fixed"
EVIL = ('<script>window.__pwned=1;document.title="pwned"</script>'
        '<img id="pwned" src="x" onerror="window.__pwned=2">')


def state(site: Site, job_id: str) -> str | None:
    return (inspector_for(site.backend).job(job_id) or {}).get("st")


def worker_dead_letter(site: Site, key: str) -> str:
    """``proj.fail_until_fixed(key)`` run by the worker: a real dead letter."""
    job_id = str(site.app.tasks[TASK].delay(key).id)
    wait_until(lambda: state(site, job_id) == "failed", timeout=60,
               message=f"{key} dead-lettered by the worker")
    return job_id


def store_dead_letter(site: Site, task: str, args: list[object], error: str) -> str:
    """A dead letter made as a worker makes one, without a worker: the app's own message,
    claimed and settled as failed with the error details."""
    job_id = str(site.app.send_task(task, args=args, queue="celery").id)
    [claim] = site.backend.claim(["celery"], "worker-1", 1).claims
    assert claim.job_id == job_id
    site.backend.settle([Settle(job_id, claim.token, "fail", {
        "reason": "task failed", "exc_type": "ConnectionError", "exc_message": error,
        "traceback": f"Traceback (most recent call last):\nConnectionError: {error}"})])
    assert state(site, job_id) == "failed"
    return job_id


def test_an_operator_retries_a_dead_letter_and_a_worker_completes_it(
        dashboard: Site, browser: Browser, start_worker: Callable[..., Worker],
        prefix: str) -> None:
    site = dashboard
    start_worker()
    first = worker_dead_letter(site, "invoice-42")
    second = worker_dead_letter(site, "invoice-43")

    # the overview, then the dead letters: both listed, newest first
    browser.open(site.operator_url + "/")
    assert "dead letters: 2" in browser.text() and "Throughput" in browser.text()
    browser.click("nav a[href='/jobs/failed']")
    assert browser.job_links() == [second, first]
    assert "2 jobs, page 1 of 1" in browser.text()
    assert "RuntimeError: invoice-42 is not fixed yet" in browser.text()
    shot_list = browser.screenshot("dead-letters.png")

    # open one: its arguments, error, history and traceback
    browser.click(f"a[href='/job/{first}']")
    assert browser.fact("state") == "failed" and browser.fact("task") == TASK
    assert 'args = ["invoice-42"]' in browser.find("#args").text
    assert "Traceback" in browser.text() and "RuntimeError: invoice-42 is not fixed" in (
        browser.text())
    shot_job = browser.screenshot("dead-letter.png")

    # fix the cause, press retry (the browser answers the Basic-auth challenge)
    redis.Redis.from_url(REDIS_URL).set(f"{prefix}:fixed:invoice-42", "1", ex=600)
    browser.click("button#retry")
    assert browser.find("#msg").text == "retry: failed -> enqueued"

    # the worker runs it again; the page shows it completed
    def completed() -> bool:
        browser.open(f"{site.operator_url}/job/{first}")
        return browser.fact("state") == "completed"

    wait_until(completed, timeout=60, interval=0.5, message="the retried job completes")
    assert not browser.find_all("form[method='post']:not([action$='/logout'])")
    assert "admin retry" in browser.text()
    browser.screenshot("completed.png")
    assert site.app.AsyncResult(first).get(timeout=10) == "invoice-42"
    assert [e["key"] for e in events(prefix, "fixed")] == ["invoice-42"]
    assert [e["key"] for e in events(prefix, "attempt")].count("invoice-42") == 2
    browser.click("nav a[href='/jobs/failed']")
    assert browser.job_links() == [second]
    browser.click("nav a[href='/jobs/completed']")
    assert browser.job_links() == [first]

    if os.environ.get("CELERY_PLUS_DOC_IMAGES") == "1":
        DOCS_IMG.mkdir(exist_ok=True)
        shutil.copy(shot_list, DOCS_IMG / "dashboard-dead-letters.png")
        shutil.copy(shot_job, DOCS_IMG / "dashboard-dead-letter.png")


def test_bulk_purge_of_selected_rows_is_confirmed_first(dashboard: Site,
                                                        browser: Browser) -> None:
    site = dashboard
    jobs = [store_dead_letter(site, "proj.send_invoice", [n], "SMTP server unreachable")
            for n in range(3)]
    browser.open(site.operator_url + "/jobs/failed")
    assert sorted(browser.job_links()) == sorted(jobs)  # (made within a ms or so: ties)
    for job_id in jobs[:2]:
        browser.find(f"input[type='checkbox'][value='{job_id}']").click()
    browser.click("button#bulk-purge-selected")
    assert "Delete for good the 2 selected failed jobs?" in browser.text()
    assert [state(site, j) for j in jobs] == ["failed"] * 3  # not yet
    browser.screenshot("bulk-confirm.png")
    browser.click("button#confirm")
    assert browser.find("#msg").text == "purged 2 of 2 selected failed jobs"
    assert browser.job_links() == [jobs[2]]
    assert [state(site, j) for j in jobs] == [None, None, "failed"]


def post(url: str, form: dict[str, str], auth: str | None, cookie: str = ""
         ) -> tuple[int, str]:
    """POST a form outside the browser; (status, body) without following a redirect."""
    request = urllib.request.Request(url, data=urlencode(form).encode(), method="POST")
    if auth:
        request.add_header("Authorization", auth)
    if cookie:
        request.add_header("Cookie", cookie)

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: Any, **kwargs: Any) -> None:
            return None

    try:
        with urllib.request.build_opener(NoRedirect).open(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def basic(password: str) -> str:
    return "Basic " + base64.b64encode(f"operator:{password}".encode()).decode()


def test_an_unauthenticated_post_is_refused_and_changes_nothing(dashboard: Site,
                                                                browser: Browser) -> None:
    site = dashboard
    job_id = store_dead_letter(site, "proj.send_invoice", [7], "SMTP server unreachable")
    # the operator's browser has the page open: its form token and session cookie
    browser.open(f"{site.operator_url}/job/{job_id}")
    token = browser.find("input[name='token']").get_attribute("value")
    cookie = browser.driver.get_cookie("plus_admin_session")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    session = f"plus_admin_session={cookie['value']}"
    url = f"{site.url}/job/{job_id}/discard"
    # the same POST from elsewhere: no, wrong or reader credentials; no form token; a form
    # token without the browser's cookie
    for auth in (None, basic("wrong-password-123456"), f"Bearer {ADMIN_TOKEN}x"):
        status, body = post(url, {"token": token}, auth, session)
        assert status == 401 and "plus_admin_token" in body
    assert post(url, {}, basic(ADMIN_TOKEN), session)[0] == 403
    assert post(url, {"token": token}, basic(ADMIN_TOKEN))[0] == 403
    assert post(f"{site.url}/jobs/failed/bulk", {"do": "purge:scope", "confirm": "1",
                                                 "token": token}, None, session)[0] == 401
    assert state(site, job_id) == "failed"
    browser.open(f"{site.operator_url}/job/{job_id}")
    assert browser.fact("state") == "failed"
    assert post(url, {"token": token}, basic(ADMIN_TOKEN), session)[0] == 303
    assert state(site, job_id) == "discarded"


class EvilSite:
    """An attacker's page on another origin — ``localhost`` (another site) or 127.0.0.1 on
    another port (the same site: another service on the operator's machine, whose pages
    share the browser's cached credentials) — that reads the dashboard's form token with a
    plain GET (as it could before issue 14), or is handed one, and makes the visitor's browser
    post the discard form at once."""

    def __init__(self, action: str, token_page: str, token: str | None = None,
                 host: str = "localhost") -> None:
        import http.server
        import threading

        if token is None:
            try:
                with urllib.request.urlopen(token_page, timeout=30) as page:
                    found = re.findall(r'name="token" value="([^"]+)"', page.read().decode())
                token = found[0] if found else ""
            except urllib.error.HTTPError as exc:  # reading needs credentials now
                assert exc.code == 401
                token = ""
        self.html = (f'<!doctype html><form method="post" action="{action}">'
                     f'<input type="hidden" name="token" value="{token}"></form>'
                     "<script>document.forms[0].submit()</script>").encode()
        html = self.html

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(html)))
                self.end_headers()
                self.wfile.write(html)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://{host}:{self.server.server_port}/"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def test_a_page_on_another_origin_cannot_make_the_operators_browser_act(
        dashboard: Site, browser: Browser) -> None:
    """Issue 14, defect 1: a logged-in operator's Chromium visits an attacker's page on
    another origin, which posts the dashboard's discard form: refused, nothing changes —
    even when the attacker holds the operator's own form token.

    The operator's credentials are ambient: Chromium sends them with every request, as it
    does an authenticating proxy's session cookie (and as browsers replay cached Basic
    credentials) — the condition under which the per-process token of the old dashboard let
    the attacker's form through."""
    site = dashboard
    job_id = store_dead_letter(site, "proj.send_invoice", [8], "SMTP server unreachable")
    browser.driver.execute_cdp_cmd("Network.enable", {})
    browser.driver.execute_cdp_cmd("Network.setExtraHTTPHeaders", {
        "headers": {"Authorization": basic(ADMIN_TOKEN)}})
    browser.open(f"{site.url}/job/{job_id}")  # logged in
    assert browser.fact("state") == "failed"
    own_token = browser.find("input[name='token']").get_attribute("value")
    action = f"{site.url}/job/{job_id}/discard"
    for token, host in ((None, "localhost"), (None, "127.0.0.1"), (own_token, "localhost"),
                        (own_token, "127.0.0.1")):
        evil = EvilSite(action, f"{site.url}/job/{job_id}", token, host)
        try:
            browser.open(evil.url)
            wait_until(lambda: browser.driver.current_url.startswith(site.url), timeout=30,
                       message="the attacker's page posted the form")
            assert state(site, job_id) == "failed", (token, host)
            assert browser.driver.current_url == action
            assert "refused" in browser.text() or "form token" in browser.text()
        finally:
            evil.close()
    browser.screenshot("cross-site-refused.png")
    # the operator's own button still works
    browser.open(f"{site.url}/job/{job_id}")
    browser.click("button#discard")
    assert browser.find("#msg").text == "discard: failed -> discarded"


def test_reading_needs_credentials_and_an_allowed_host(dashboard: Site,
                                                       browser: Browser) -> None:
    """Issue 14, defect 3: without credentials no page, JSON or metric is served; a name
    rebound to 127.0.0.1 (DNS rebinding) gets nothing even with them."""
    site = dashboard
    secret = "card-4242-4242-4242"
    job_id = store_dead_letter(site, "proj.charge", [secret], f"declined {secret}")
    for path in ("/", "/jobs/failed", f"/job/{job_id}", f"/api/job/{job_id}",
                 "/api/jobs/failed", "/metrics", "/workers"):
        browser.open(site.url + path)
        # (Chromium shows an empty page for a 401 it cannot ask credentials for)
        assert secret not in browser.driver.page_source, path
        assert browser.text() == "" or "authentication required" in browser.text(), path
    rebound = f"http://operator:{ADMIN_TOKEN}@rebound.test:{site.url.rsplit(':', 1)[1]}"
    for path in (f"/job/{job_id}", f"/api/job/{job_id}"):
        browser.open(rebound + path)
        assert secret not in browser.driver.page_source, path
        assert "not one this dashboard answers to" in browser.text(), path
    browser.open(f"{site.operator_url}/api/job/{job_id}")
    assert secret in browser.text()


def test_a_script_in_job_arguments_renders_inert(dashboard: Site, browser: Browser) -> None:
    site = dashboard
    job_id = store_dead_letter(site, "proj.render", [EVIL], EVIL)
    # Only the HTML escaping may stop the script: the page's CSP is switched off.
    browser.driver.execute_cdp_cmd("Page.setBypassCSP", {"enabled": True})
    for path, title in (("/jobs/failed", "failed jobs"),
                        (f"/jobs/failed?text={quote(EVIL)}", "failed jobs"),
                        (f"/job/{job_id}", f"job {job_id}"),
                        (f"/job/{job_id}?msg={quote(EVIL)}&sig={site.web.access.sign(EVIL)}",
                         f"job {job_id}")):
        browser.open(site.operator_url + path)
        assert browser.driver.title == title, path
        assert browser.driver.execute_script("return window.__pwned === undefined"), path
        assert not browser.find_all("script") and not browser.find_all("#pwned"), path
        assert not browser.find_all("td img, pre img, p img"), path
        assert EVIL in browser.text(), path  # shown as text
    browser.screenshot("inert-script.png")
