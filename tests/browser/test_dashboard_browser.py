"""The web dashboard in a real browser (headless Chromium) on real data.

Issue 5 (web part): list dead letters, open one, retry it and see it complete; a POST
without the admin token (``plus_admin_token``) is refused; a job argument containing
``<script>`` renders inert (the DOM shows the text, no script element comes from it).
Screenshots go to ``<tmp>/artifacts/``; with ``CELERY_PLUS_DOC_IMAGES=1`` two of them are
also copied to ``docs/img/`` (shown in docs/admin.md).

The dead letters are made through the store as a worker makes them: published by the app's
``send_task`` (a real Celery message), claimed, and settled as failed with the error details;
the retried job is claimed again and acknowledged.
"""

from __future__ import annotations

import base64
import os
import shutil
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlencode

from celery_plus.transport.backend import Settle
from tests.browser.conftest import ADMIN_TOKEN, Chromium, Site

DOCS_IMG = Path(__file__).resolve().parents[2] / "docs" / "img"
EVIL = '<script>document.title="pwned";document.body.innerHTML="pwned"</script>'


def dead_letter(site: Site, task: str, args: list[object], error: str) -> str:
    """Publish a job (the app's own message), claim it and settle it as failed."""
    job_id = site.app.send_task(task, args=args, queue="celery").id
    [claim] = site.backend.claim(["celery"], "worker-1", 1).claims
    assert claim.job_id == job_id
    site.backend.settle([Settle(job_id, claim.token, "fail", {
        "reason": "task failed", "exc_type": "ConnectionError", "exc_message": error,
        "traceback": f"Traceback (most recent call last):\nConnectionError: {error}"})])
    assert (site.backend.job(job_id) or {}).get("st") == "failed"
    return job_id


def post(url: str, form: dict[str, str], auth: str | None) -> tuple[int, str, str]:
    """POST a form; (status, Location, body) without following the redirect."""
    request = urllib.request.Request(url, data=urlencode(form).encode(), method="POST")
    if auth:
        request.add_header("Authorization", auth)

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: object, **kwargs: object) -> None:
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(request, timeout=30) as response:
            return response.status, response.headers.get("Location", ""), response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers.get("Location", ""), exc.read().decode()


def basic(password: str) -> str:
    return "Basic " + base64.b64encode(f"operator:{password}".encode()).decode()


def test_list_open_retry_and_complete_a_dead_letter(dashboard: Site,
                                                    chromium: Chromium) -> None:
    site = dashboard
    invoice = dead_letter(site, "proj.send_invoice", [42], "SMTP server unreachable")
    evil = dead_letter(site, "proj.render", [EVIL], "bad markup")

    # the listing: both dead letters, newest first, each a link to its page
    listing = chromium.dom(f"{site.url}/failed?page=1")
    links = [a.attrs["href"] for a in listing.all("a") if a.attrs["href"].startswith("/job/")]
    assert links == [f"/job/{evil}", f"/job/{invoice}"]
    assert "2 jobs, page 1 of 1" in listing.text
    assert "ConnectionError: SMTP server unreachable" in listing.text
    shot_list = chromium.screenshot(f"{site.url}/jobs/failed", "dead-letters.png")

    # open one: its arguments, error, history and a retry form
    page = chromium.dom(site.url + links[1])
    assert "args = [42]" in page.text and "ConnectionError: SMTP server unreachable" in page.text
    assert "Traceback" in page.text
    [form] = page.all("form", method="post", action=f"/job/{invoice}/retry")
    token = page.all("input", name="token")[0]  # the same per-process token in each form
    shot_job = chromium.screenshot(site.url + links[1], "dead-letter.png")

    # press retry: the form as the browser would send it, with the operator's credentials
    status, location, _ = post(site.url + form.attrs["action"], {"token": token.attrs["value"]},
                               basic(ADMIN_TOKEN))
    assert status == 303 and location.startswith(f"/job/{invoice}?msg=")
    retried = chromium.dom(site.url + location)
    assert "retry: failed -> enqueued" in retried.text
    assert retried.all("form", action=f"/job/{invoice}/cancel")
    assert [e.text for e in retried.all("td")][:2] == ["state", "enqueued"]

    # a worker runs it: claimed again and acknowledged
    [claim] = site.backend.claim(["celery"], "worker-2", 1).claims
    assert claim.job_id == invoice
    site.backend.settle([Settle(invoice, claim.token, "ack")])
    done = chromium.dom(f"{site.url}/job/{invoice}")
    assert [e.text for e in done.all("td")][:2] == ["state", "completed"]
    assert not done.all("form")
    chromium.screenshot(f"{site.url}/job/{invoice}", "completed.png")
    listing = chromium.dom(f"{site.url}/jobs/failed")
    assert [a.attrs["href"] for a in listing.all("a")
            if a.attrs["href"].startswith("/job/")] == [f"/job/{evil}"]
    assert chromium.dom(f"{site.url}/jobs/completed").all("a", href=f"/job/{invoice}")

    if os.environ.get("CELERY_PLUS_DOC_IMAGES") == "1":
        DOCS_IMG.mkdir(exist_ok=True)
        shutil.copy(shot_list, DOCS_IMG / "dashboard-dead-letters.png")
        shutil.copy(shot_job, DOCS_IMG / "dashboard-dead-letter.png")


def test_a_post_without_the_admin_token_is_refused(dashboard: Site, chromium: Chromium) -> None:
    site = dashboard
    job_id = dead_letter(site, "proj.send_invoice", [7], "SMTP server unreachable")
    page = chromium.dom(f"{site.url}/job/{job_id}")
    [form] = page.all("form", action=f"/job/{job_id}/discard")
    [token, _] = page.all("input", name="token")
    url, data = site.url + form.attrs["action"], {"token": token.attrs["value"]}
    for auth in (None, basic("wrong-password-123456"), f"Bearer {ADMIN_TOKEN}x"):
        status, _, body = post(url, data, auth)
        assert status == 401 and "plus_admin_token" in body
    assert (site.backend.job(job_id) or {}).get("st") == "failed"
    # right credentials but no form token (a cross-site post): refused too
    assert post(url, {}, f"Bearer {ADMIN_TOKEN}")[0] == 403
    assert "failed" in [e.text for e in chromium.dom(f"{site.url}/job/{job_id}").all("td")]
    status, location, _ = post(url, data, f"Bearer {ADMIN_TOKEN}")
    assert status == 303 and (site.backend.job(job_id) or {}).get("st") == "discarded"
    assert "discard: failed -> discarded" in chromium.dom(site.url + location).text


def test_a_script_in_job_arguments_renders_inert(dashboard: Site, chromium: Chromium) -> None:
    site = dashboard
    job_id = dead_letter(site, "proj.render", [EVIL], EVIL)
    for path in ("/jobs/failed", f"/jobs/failed?text={EVIL}", f"/job/{job_id}",
                 f"/job/{job_id}?msg={EVIL}"):
        dom = chromium.dom(site.url + path)
        assert not dom.all("script"), path           # no script element came from the data
        assert "pwned" not in "".join(e.text for e in dom.all("title")), path
        assert EVIL in dom.text, path                 # the text is shown as text
    chromium.screenshot(f"{site.url}/job/{job_id}", "inert-script.png")
