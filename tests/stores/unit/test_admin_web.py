"""The admin's web dashboard (``celery_plus/admin/web.py``), called as a WSGI application.

Issue 5 (web part): an overview with counts and throughput, listings with filters, paging and
bulk actions (selected rows or the whole filter; destructive ones confirmed first), a job's
detail, retry / discard / cancel buttons guarded by the admin token and a form token, JSON
endpoints, /metrics; every value HTML-escaped; every link, form and redirect under the mount
point (``SCRIPT_NAME``). Runs on a SQLite store in the test's tmp_path.

Requests carry the operator's Bearer token unless a test says otherwise (``headers=``); a
browser's flow (Basic auth, the session cookie and its form token) is :func:`browser_post`.
Issue 14's security rules have their own module (``test_admin_web_security.py``).
"""

from __future__ import annotations

import base64
import html
import io
import json
import re
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlencode, urlsplit
from wsgiref.simple_server import WSGIRequestHandler, make_server
from wsgiref.util import setup_testing_defaults

import pytest
from prometheus_client.parser import text_string_to_metric_families

from celery_plus import Celery
from celery_plus.admin import connect
from celery_plus.admin.web import Dashboard, Mount, make_app
from celery_plus.model.store import NewJob, Settle
from tests.fast.unit.test_admin_cli import Store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    app = Celery("admin-web", broker=f"plus+sqlite:///{tmp_path / 'store.db'}",
                 set_as_current=False)
    admin = connect(app)
    yield Store(app, admin.store.backend)  # type: ignore[attr-defined]
    admin.close()
    app.close()


ADMIN_TOKEN = "W4nWThrUU0IAFbrZO5DHcmqzUO3MR_Dd"
BEARER = {"HTTP_AUTHORIZATION": f"Bearer {ADMIN_TOKEN}"}


@pytest.fixture
def web(store: Store) -> Iterator[Dashboard]:
    dashboard = make_app(store.app, admin_token=ADMIN_TOKEN)
    yield dashboard
    dashboard.close()


Form = dict[str, str] | list[tuple[str, str]]


def call(web: Any, path: str, method: str = "GET", form: Form | None = None,
         query: str = "", headers: dict[str, str] | None = None
         ) -> tuple[str, dict[str, str], str]:
    environ: dict[str, Any] = {"PATH_INFO": path, "REQUEST_METHOD": method,
                               "QUERY_STRING": query, "SCRIPT_NAME": "",
                               **(BEARER if headers is None else headers)}
    body = urlencode(form or {}).encode()
    environ["wsgi.input"] = io.BytesIO(body)
    environ["CONTENT_LENGTH"] = str(len(body))
    setup_testing_defaults(environ)
    got: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]]) -> None:
        got["status"], got["headers"] = status, dict(headers)

    data = b"".join(web(environ, start_response))
    return got["status"], got["headers"], data.decode()


def basic(user: str, password: str) -> dict[str, str]:
    raw = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"HTTP_AUTHORIZATION": f"Basic {raw}"}


def browser_session(web: Any, path: str = "/jobs/failed") -> tuple[str, str]:
    """What an operator's browser gets from a page: (its session cookie, the form token)."""
    status, headers, page = call(web, path, headers=basic("op", ADMIN_TOKEN))
    assert status == "200 OK", page
    cookie = headers["Set-Cookie"].split(";", 1)[0]
    [token] = re.findall(r'name="token" value="([^"]+)"', page)[:1]
    return cookie, token


def browser_post(web: Any, path: str, form: Form, session: tuple[str, str] | None = None,
                 **headers: str) -> tuple[str, dict[str, str], str]:
    """A POST as the operator's browser sends it: Basic auth, its cookie, the form token."""
    cookie, token = session or browser_session(web)
    fields = [*(form.items() if isinstance(form, dict) else form), ("token", token)]
    return call(web, path, "POST", fields,
                headers={**basic("op", ADMIN_TOKEN), "HTTP_COOKIE": cookie, **headers})


def test_the_status_page_shows_counts_queues_and_groups(store: Store, web: Dashboard) -> None:
    store.dead("f1", queue="mail")
    store.job("run", concurrency_group="g", concurrency_limit=1)
    store.backend.claim(["celery"], "w", 1)
    status, headers, page = call(web, "/")
    assert status == "200 OK" and headers["Content-Type"].startswith("text/html")
    assert 'dead letters: <a href="/jobs/failed">1</a>' in page
    assert "<td>mail</td>" in page and "Concurrency groups" in page
    api_status, _, raw = call(web, "/api/status")
    assert api_status == "200 OK" and json.loads(raw)["dead_letters"] == 1


def test_a_listing_is_filtered_and_escaped(store: Store, web: Dashboard) -> None:
    store.dead("evil", args=["<script>alert(1)</script>"])
    store.dead("other", task="proj.bill")
    status, _, page = call(web, "/jobs/failed", query="task=proj.mail")
    assert status == "200 OK"
    assert '<a href="/job/evil">evil</a>' in page and "/job/other" not in page
    assert "<script>" not in page and "&lt;script&gt;" in call(web, "/job/evil")[2]
    data = json.loads(call(web, "/api/jobs/failed", query="task=proj.bill")[2])
    assert [i["id"] for i in data["items"]] == ["other"]
    assert call(web, "/jobs/nonsense")[0] == "400 Bad Request"


def test_the_job_page_and_its_retry_button(store: Store, web: Dashboard) -> None:
    store.dead("job-1", args=["alice"])
    status, _, page = call(web, "/job/job-1")
    assert status == "200 OK" and "ConnectionError: SMTP down" in page
    assert "Traceback" in page and 'action="/job/job-1/retry"' in page
    cookie, token = browser_session(web, "/job/job-1")
    # A form token carries the time it was made (itsdangerous): a page served in another
    # second carries another one, each valid.
    assert re.search(r'<input type="hidden" name="token" value="[^"]+">', call(
        web, "/job/job-1", headers={**basic("op", ADMIN_TOKEN), "HTTP_COOKIE": cookie})[2])
    assert call(web, "/job/job-1/retry", "POST", {},
                headers={**basic("op", ADMIN_TOKEN), "HTTP_COOKIE": cookie})[0] == (
        "403 Forbidden")
    assert store.state("job-1") == "failed"
    status, headers, _ = browser_post(web, "/job/job-1/retry", {}, (cookie, token))
    assert status == "303 See Other" and headers["Location"].startswith("/job/job-1?msg=")
    assert store.state("job-1") == "enqueued"
    status, _, page = call(web, "/job/job-1", query=headers["Location"].split("?", 1)[1],
                           headers={**basic("op", ADMIN_TOKEN), "HTTP_COOKIE": cookie})
    assert "retry: failed -&gt; enqueued" in page and 'action="/job/job-1/cancel"' in page
    status, headers, _ = call(web, "/job/job-1/retry", "POST", {})  # Bearer: no form token
    assert status == "303 See Other" and "nothing+to+retry" in headers["Location"]


def test_conflicts_unknown_jobs_and_pages(store: Store, web: Dashboard) -> None:
    store.dead("a", unique_lock="K", unique_window="running")
    store.job("holder", unique_lock="K", unique_window="running")
    status, _, text = call(web, "/job/a/retry", "POST", {})
    assert status == "409 Conflict" and "held by job 'holder'" in text
    assert call(web, "/job/nope")[0] == "404 Not Found"
    assert call(web, "/api/job/nope")[0] == "404 Not Found"
    assert call(web, "/job/nope/discard", "POST", {})[0] == "404 Not Found"
    assert call(web, "/elsewhere")[0] == "404 Not Found"
    assert call(web, "/", "DELETE")[0] == "405 Method Not Allowed"


def test_posts_need_the_admin_token_from_the_settings(store: Store, tmp_path: Path) -> None:
    store.dead("d1")
    read_only = make_app(store.app)  # plus_admin_token not set: read-only
    try:
        assert read_only.admin_token is None
        status, _, text = call(read_only, "/job/d1/retry", "POST", {})
        assert status == "403 Forbidden" and "plus_admin_token" in text
        page = call(read_only, "/job/d1", headers={})[2]  # open for reading
        assert "read-only" in page and 'action="/job/d1/retry"' not in page
    finally:
        read_only.close()
    store.app.conf.plus_admin_token = ADMIN_TOKEN
    web = make_app(store.app)
    try:
        assert web.admin_token == ADMIN_TOKEN
        session = browser_session(web)
        for headers in ({}, {"HTTP_AUTHORIZATION": "Bearer wrong-token-of-some-length"},
                        basic("admin", "nope"), {"HTTP_AUTHORIZATION": "Basic !!!"}):
            status, got, text = call(web, "/job/d1/retry", "POST", {"token": session[1]},
                                     headers={**headers, "HTTP_COOKIE": session[0]})
            assert status == "401 Unauthorized" and "plus_admin_token" in text
            assert got["WWW-Authenticate"].startswith("Basic ")
        assert store.state("d1") == "failed"
        # the right credentials but no form token: still refused (cross-site guard)
        assert call(web, "/job/d1/retry", "POST", {}, headers=basic("x", ADMIN_TOKEN))[0] == (
            "403 Forbidden")
        status, _, _ = browser_post(web, "/job/d1/retry", {}, session)
        assert status == "303 See Other" and store.state("d1") == "enqueued"
        # with a token set, reading needs credentials too
        assert call(web, "/job/d1", headers={})[0] == "401 Unauthorized"
    finally:
        web.close()


def test_the_admin_token_setting_is_validated() -> None:
    from celery.exceptions import ImproperlyConfigured

    from celery_plus import settings

    assert settings.resolve({}).admin_token is None
    assert settings.resolve({"plus_admin_token": ADMIN_TOKEN}).admin_token == ADMIN_TOKEN
    for bad in ("short", "has a space in the middle!", 1234567890123456789, ""):
        with pytest.raises(ImproperlyConfigured, match="plus_admin_token"):
            settings.resolve({"plus_admin_token": bad})


def test_every_page_escapes_untrusted_values(store: Store, web: Dashboard) -> None:
    evil = '"><script>alert(1)</script><img src=x onerror=alert(2)>'
    store.dead("e1", queue="q<u>", args=[evil], error=evil)
    for path, query in (("/", ""), ("/jobs/failed", f"text={evil}"), ("/job/e1", f"msg={evil}"),
                        ("/failed", "")):
        status, headers, page = call(web, path, query=query)
        assert status == "200 OK", path
        assert "<script" not in page and "<img" not in page and "<u>" not in page, path
        assert "script-src" not in headers["Content-Security-Policy"]
        assert "default-src 'none'" in headers["Content-Security-Policy"]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in call(web, "/job/e1")[2]


def test_metrics_in_prometheus_text_format(store: Store, web: Dashboard) -> None:
    store.dead("m1", queue="mail")
    store.dead("m2", queue="mail")
    store.job("w1", queue='we"ird')
    store.job("u1", unique_lock="K", unique_window="pending")
    duplicate = NewJob(id="u2", queue="celery", message="{}", name="proj.mail",
                       unique_lock="K", unique_window="pending")
    assert not store.backend.publish(duplicate).accepted
    status, headers, text = call(web, "/metrics")
    assert status == "200 OK" and headers["Content-Type"].startswith("text/plain; version=0.0.4")
    # the series names of earlier releases; values as prometheus_client writes them (2.0)
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    kinds = {family.name: family.type for family in text_string_to_metric_families(text)}
    assert kinds["celery_plus_jobs"] == "gauge"
    assert samples[("celery_plus_jobs", (("state", "failed"),))] == 2
    assert samples[("celery_plus_jobs", (("state", "enqueued"),))] == 2
    assert samples[("celery_plus_queue_jobs", (("queue", "mail"), ("state", "failed")))] == 2
    assert samples[("celery_plus_queue_jobs", (("queue", 'we"ird'), ("state", "enqueued")))] == 1
    assert 'celery_plus_queue_jobs{queue="we\\"ird",state="enqueued"} 1.0' in text.splitlines()
    assert samples[("celery_plus_dead_letters", ())] == 2
    assert samples[("celery_plus_dead_lettered_total", ())] == 2
    assert samples[("celery_plus_deduplicated_total", ())] == 1
    for name in ("recovered", "deduplicated", "blocked"):
        assert kinds[f"celery_plus_{name}"] == "counter"
        assert ("celery_plus_" + name + "_total", ()) in samples


def test_a_bad_admin_token_setting_stops_the_dashboard(store: Store, tmp_path: Path) -> None:
    from celery.exceptions import ImproperlyConfigured

    store.app.conf.plus_admin_token = "too short"
    with pytest.raises(ImproperlyConfigured, match="plus_admin_token"):
        make_app(store.app)
    url_only = make_app(f"plus+sqlite:///{tmp_path / 'store.db'}")  # a URL: no settings
    try:
        assert url_only.admin_token is None
        assert call(url_only, "/job/x/retry", "POST", {})[0] == "403 Forbidden"
    finally:
        url_only.close()


def finish(store: Store, job_id: str) -> None:
    """Publish a job, claim it and acknowledge it: a completed record."""
    store.job(job_id)
    [got] = store.backend.claim(["celery"], "w1", 1).claims
    store.backend.settle([Settle(job_id, got.token, "ack")])


def test_the_overview_shows_throughput(store: Store, web: Dashboard) -> None:
    finish(store, "c1")
    finish(store, "c2")
    store.dead("f1")
    page = call(web, "/")[2]
    rows = re.findall(r"<tr><td>(\d+[hm]\d+[ms])</td><td>(\d+)</td><td>([\d.]+)</td>"
                      r"<td>(\d+)</td><td>([\d.]+)</td></tr>", page)
    assert rows == [("5m00s", "2", "0.4", "1", "0.2"), ("1h00m", "2", "0.0", "1", "0.0")]
    data = json.loads(call(web, "/api/throughput")[2])
    assert [(t["window_s"], t["completed"], t["failed"]) for t in data] == [
        (300, 2, 1), (3600, 2, 1)]
    assert data[0]["completed_per_min"] == 0.4


def bulk(web: Dashboard, state: str, do: str, ids: tuple[str, ...] = (), **fields: str
         ) -> tuple[str, dict[str, str], str]:
    form = [("do", do), *(("id", i) for i in ids), *fields.items()]
    return call(web, f"/jobs/{state}/bulk", "POST", form)


def msg_of(location: str) -> str:
    return parse_qs(urlsplit(location).query)["msg"][0]


def test_a_listing_offers_bulk_actions_on_selected_rows_and_the_filter(
        store: Store, web: Dashboard) -> None:
    store.dead("a")
    operator = {**basic("op", ADMIN_TOKEN), "HTTP_COOKIE": browser_session(web)[0]}
    page = call(web, "/jobs/failed", query="task=proj.mail", headers=operator)[2]
    assert '<form method="post" action="/jobs/failed/bulk" id="bulk">' in page
    assert '<input type="checkbox" name="id" value="a" aria-label="select a">' in page
    for button in ("retry:selected", "discard:selected", "purge:selected", "retry:scope",
                   "purge:scope"):
        assert f'value="{button}"' in page
    assert "every job of this filter (task proj.mail)" in page
    assert '<input type="hidden" name="task" value="proj.mail">' in page
    text_filtered = call(web, "/jobs/failed", query="text=SMTP", headers=operator)[2]
    # a text filter too: every match of it (admin/filter_actions.py)
    assert 'value="retry:selected"' in text_filtered and 'value="retry:scope"' in text_filtered
    assert 'value="cancel:selected"' not in page
    store.job("w")
    assert 'value="cancel:selected"' in call(web, "/jobs/enqueued", headers=operator)[2]
    assert 'type="checkbox"' not in call(web, "/jobs/running", headers=operator)[2]
    read_only = make_app(store.app)
    try:
        page = call(read_only, "/jobs/failed")[2]
        assert 'type="checkbox"' not in page and "read-only" in page
    finally:
        read_only.close()


def test_bulk_retry_of_the_selected_dead_letters(store: Store, web: Dashboard) -> None:
    for job_id in ("a", "b", "c"):
        store.dead(job_id)
    status, headers, _ = bulk(web, "failed", "retry:selected", ("a", "b", "a"), task="proj.mail")
    assert status == "303 See Other"
    assert headers["Location"].startswith("/jobs/failed?task=proj.mail&msg=")
    assert msg_of(headers["Location"]) == "retried 2 of 2 selected failed jobs"
    assert [store.state(i) for i in "abc"] == ["enqueued", "enqueued", "failed"]
    page = call(web, "/jobs/failed", query=urlsplit(headers["Location"]).query)[2]
    assert '<p class="msg" id="msg">retried 2 of 2 selected failed jobs</p>' in page
    forged = call(web, "/jobs/failed", query="msg=" + quote("Session expired: log in at "
                                                             "evil.example"))[2]
    assert 'id="msg"' not in forged and "evil.example" not in forged
    _, headers, _ = bulk(web, "failed", "retry:selected", ("a", "c"))
    assert msg_of(headers["Location"]) == "retried 1 of 1 selected failed jobs"
    _, headers, _ = bulk(web, "failed", "retry:selected")
    assert msg_of(headers["Location"]) == "no job selected"


def test_destructive_bulk_actions_are_confirmed_first(store: Store, web: Dashboard) -> None:
    for job_id in ("a", "b", "c"):
        store.dead(job_id)
    status, _, page = bulk(web, "failed", "purge:selected", ("a", "b"))
    assert status == "200 OK" and "Delete for good the 2 selected failed jobs?" in page
    assert '<input type="hidden" name="confirm" value="1">' in page
    assert '<a href="/jobs/failed" id="back">' in page
    assert [store.state(i) for i in "abc"] == ["failed"] * 3  # nothing done yet
    status, headers, _ = bulk(web, "failed", "purge:selected", ("a", "b"), confirm="1")
    assert status == "303 See Other"
    assert msg_of(headers["Location"]) == "purged 2 of 2 selected failed jobs"
    assert [store.state(i) for i in "abc"] == [None, None, "failed"]
    status, _, page = bulk(web, "failed", "discard:selected", ("c",))
    assert status == "200 OK" and "Discard the 1 selected failed job?" in page
    bulk(web, "failed", "discard:selected", ("c",), confirm="1")
    assert store.state("c") == "discarded"
    store.job("w1")
    store.job("w2")
    status, _, page = bulk(web, "enqueued", "cancel:selected", ("w1",))
    assert status == "200 OK" and store.state("w1") == "enqueued"
    _, headers, _ = bulk(web, "enqueued", "cancel:selected", ("w1",), confirm="1")
    assert msg_of(headers["Location"]) == "canceled 1 of 1 selected enqueued jobs"
    assert (store.state("w1"), store.state("w2")) == ("canceled", "enqueued")


def test_bulk_actions_on_the_whole_filter(store: Store, web: Dashboard) -> None:
    store.dead("m1", task="proj.mail")
    store.dead("m2", task="proj.mail", queue="slow")
    store.dead("b1", task="proj.bill")
    status, _, page = bulk(web, "failed", "retry:scope", task="proj.mail")
    assert status == "200 OK"
    assert "Retry all 2 failed jobs of this filter (task proj.mail)?" in page
    assert store.state("m1") == "failed"
    _, headers, _ = bulk(web, "failed", "retry:scope", task="proj.mail", confirm="1")
    assert headers["Location"].startswith("/jobs/failed?task=proj.mail&msg=")
    assert msg_of(headers["Location"]) == "retried 2 of 2 matching failed jobs"
    assert [store.state(i) for i in ("m1", "m2", "b1")] == ["enqueued", "enqueued", "failed"]
    # the age filter: nothing finished an hour ago; everything finished 0 s ago
    _, _, page = bulk(web, "failed", "purge:scope", older_than="1h")
    assert "all 0 failed jobs of this filter (finished more than 1h ago)" in page
    _, headers, _ = bulk(web, "failed", "purge:scope", older_than="1h", confirm="1")
    assert msg_of(headers["Location"]) == "purged 0 of 0 matching failed jobs"
    assert store.state("b1") == "failed"
    _, _, page = bulk(web, "failed", "purge:scope")
    assert "all 1 failed job of this filter (every one, no filter)" in page
    bulk(web, "failed", "purge:scope", confirm="1")
    assert store.state("b1") is None
    assert 'older_than' in call(web, "/jobs/failed", query="older_than=1h")[2]
    assert call(web, "/jobs/failed", query="older_than=soon")[0] == "400 Bad Request"


def test_bulk_actions_follow_the_rules_of_single_actions(store: Store, web: Dashboard) -> None:
    store.dead("a", unique_lock="K", unique_window="running")
    store.dead("b")
    store.job("holder", unique_lock="K", unique_window="running")
    form = [("do", "retry:selected"), ("id", "a")]
    for headers in ({}, {"HTTP_AUTHORIZATION": "Bearer wrong-token-of-some-length"}):
        assert call(web, "/jobs/failed/bulk", "POST", form, headers=headers)[0] == (
            "401 Unauthorized")
    assert call(web, "/jobs/failed/bulk", "POST", form,
                headers=basic("op", ADMIN_TOKEN))[0] == "403 Forbidden"  # no form token
    assert store.state("a") == "failed"
    assert bulk(web, "failed", "cancel:selected", ("a",))[0] == "400 Bad Request"
    assert bulk(web, "running", "purge:scope")[0] == "400 Bad Request"
    assert bulk(web, "nonsense", "purge:scope")[0] == "404 Not Found"
    assert bulk(web, "failed", "purge:scope", text="SMTP")[0] == "200 OK"  # (confirm first)
    _, headers, _ = bulk(web, "failed", "retry:selected", ("a", "b"))
    assert msg_of(headers["Location"]) == (
        "retried 1 of 2 selected failed jobs; not retried: a (key held by holder)")
    assert (store.state("a"), store.state("b")) == ("failed", "enqueued")


def test_more_selected_rows_than_a_bulk_action_takes_are_refused_before_confirming(
        store: Store, web: Dashboard) -> None:
    """1001 selected rows: every bulk action says so at once (400), instead of a
    confirmation page offering what the confirmed step then refuses (purge) or does one by
    one (discard, cancel)."""
    store.dead("d1")
    store.job("w1")
    many = ("d1", *(f"x{n}" for n in range(1000)))
    for state, do, confirmed in (("failed", "purge:selected", "0"),
                                 ("failed", "discard:selected", "0"),
                                 ("failed", "discard:selected", "1"),
                                 ("failed", "retry:selected", "1"),
                                 ("enqueued", "cancel:selected", "1")):
        ids = ("w1", *many[1:]) if state == "enqueued" else many
        status, _, text = bulk(web, state, do, ids, confirm=confirmed)
        assert status == "400 Bad Request", (do, confirmed, status)
        assert "at most 1000 task ids at once (got 1001)" in text, text
    assert (store.state("d1"), store.state("w1")) == ("failed", "enqueued")
    with connect(store.app) as admin:
        for operation in (admin.discard_many, admin.cancel_many):
            with pytest.raises(ValueError, match="at most 1000"):
                operation(list(many))
    assert (store.state("d1"), store.state("w1")) == ("failed", "enqueued")
    assert bulk(web, "failed", "retry:selected", many[:1000])[0] == "303 See Other"
    assert store.state("d1") == "enqueued"


# -- mounted under a path prefix ------------------------------------------------------------
LINK = re.compile(r'(?:href|action)="([^"]*)"')


def links(page: str) -> list[str]:
    return [html.unescape(link) for link in LINK.findall(page)]


def test_mounted_under_a_prefix_every_link_form_and_redirect_stays_under_it(
        store: Store, web: Dashboard) -> None:
    store.dead("d1")
    store.dead("d2")
    store.job("w1")
    site = Mount(web, "/ops/celery")
    pages = {path: call(site, path, query=query)
             for path, query in (("/ops/celery", ""), ("/ops/celery/", ""),
                                 ("/ops/celery/jobs/failed", "task=proj.mail&per_page=1"),
                                 ("/ops/celery/job/d1", ""), ("/ops/celery/failed", ""))}
    confirm = call(site, "/ops/celery/jobs/failed/bulk", "POST",
                   [("do", "purge:selected"), ("id", "d1")])
    assert confirm[0] == "200 OK"
    seen = set()
    for path, (status, _, page) in [*pages.items(), ("confirm", confirm)]:
        assert status == "200 OK", path
        for link in links(page):
            assert link.startswith("/ops/celery/"), (path, link)
            seen.add(link)
    assert {"/ops/celery/", "/ops/celery/jobs/failed", "/ops/celery/job/d1",
            "/ops/celery/job/d1/retry", "/ops/celery/jobs/failed/bulk",
            "/ops/celery/jobs/failed?task=proj.mail&per_page=1&page=2",
            "/ops/celery/queues/celery/pause"} <= seen
    for link in seen:
        if not link.endswith(("/retry", "/discard", "/cancel", "/bulk", "/pause", "/logout")):
            path, _, query = link.partition("?")
            assert call(site, path, query=query)[0] == "200 OK", link
    status, headers, _ = call(site, "/ops/celery/job/d1/retry", "POST", {})
    assert status == "303 See Other" and headers["Location"].startswith("/ops/celery/job/d1?")
    status, headers, _ = call(site, "/ops/celery/jobs/failed/bulk", "POST",
                              [("do", "retry:selected"), ("id", "d2")])
    assert headers["Location"].startswith("/ops/celery/jobs/failed?msg=")
    assert call(site, "/elsewhere")[0] == "404 Not Found"
    assert call(site, "/ops/celeryx")[0] == "404 Not Found"
    with pytest.raises(ValueError, match="mount prefix"):
        Mount(web, "ops/")


class _KeepAuth(urllib.request.HTTPRedirectHandler):
    """Follow a redirect with the same Authorization header (urllib drops it)."""

    def __init__(self, headers: dict[str, str]) -> None:
        self.extra = headers

    def redirect_request(self, *args: Any, **kwargs: Any) -> Any:
        new = super().redirect_request(*args, **kwargs)
        if new is not None:
            for name, value in self.extra.items():
                new.add_header(name, value)
        return new


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def test_mounted_under_a_prefix_over_http(store: Store, web: Dashboard) -> None:
    """The same through a real HTTP server (wsgiref) and client that follows redirects."""
    store.dead("d1")

    def site(environ: dict[str, Any], start_response: Any) -> Any:
        if environ["PATH_INFO"] == "/":
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [b"the host site"]
        return Mount(web, "/ops/celery")(environ, start_response)

    server = make_server("127.0.0.1", 0, site, handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    base = f"http://127.0.0.1:{server.server_port}"
    try:
        with urllib.request.urlopen(f"{base}/", timeout=30) as response:
            assert response.read() == b"the host site"
        bearer = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
        request = urllib.request.Request(f"{base}/ops/celery/job/d1/retry", method="POST",
                                         data=b"", headers=bearer)
        opener = urllib.request.build_opener(_KeepAuth(bearer))
        with opener.open(request, timeout=30) as response:  # follows the 303
            assert urlsplit(response.url).path == "/ops/celery/job/d1"
            page = response.read().decode()
        assert "retry: failed -&gt; enqueued" in page
        assert all(link.startswith("/ops/celery/") for link in links(page))
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


DOCS = Path(__file__).resolve().parents[3] / "docs" / "admin.md"


def docs_recipe(heading: str) -> str:
    """The Python block after docs/admin.md's ``**<heading>**`` paragraph."""
    block = re.search(rf"\*\*{heading}\*\*.*?```python\n(.*?)```", DOCS.read_text(), re.S)
    assert block is not None, f"docs/admin.md's {heading} recipe"
    return block.group(1)


def test_mounted_in_flask_as_the_docs_say(store: Store) -> None:
    """docs/admin.md's Flask recipe, run as written (with ``proj.celery``'s app replaced by
    the test's), served by waitress: the site's own page, every link and the cookie's Path
    under the prefix, and a browser's form post redirected under it."""
    from waitress.server import create_server

    from celery_plus.admin.server import stop

    store.dead("d1")
    store.app.conf.plus_admin_token = ADMIN_TOKEN
    imported = "from proj.celery import app as celery_app\n"
    code = docs_recipe("Flask")
    assert imported in code
    namespace: dict[str, Any] = {"__name__": "docs_admin_flask_recipe",
                                 "celery_app": store.app}
    exec(compile(code.replace(imported, ""), str(DOCS), "exec"), namespace)
    site = namespace["site"]
    site.add_url_rule("/", "home", lambda: "the host site")
    server = create_server(site.wsgi_app, host="127.0.0.1", port=0)
    server.dashboard = site.wsgi_app.mounts["/ops/celery"]  # (closed by stop)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.effective_port}"
    auth = {"Authorization": basic("op", ADMIN_TOKEN)["HTTP_AUTHORIZATION"]}
    try:
        with urllib.request.urlopen(f"{base}/", timeout=30) as response:
            assert response.read() == b"the host site"
        with urllib.request.urlopen(urllib.request.Request(
                f"{base}/ops/celery/jobs/failed", headers=auth), timeout=30) as response:
            cookie = response.headers["Set-Cookie"]
            page = response.read().decode()
        assert "; Path=/ops/celery;" in cookie, cookie
        assert links(page) and all(link.startswith("/ops/celery/") for link in links(page))
        [token] = re.findall(r'name="token" value="([^"]+)"', page)[:1]
        request = urllib.request.Request(
            f"{base}/ops/celery/job/d1/discard", data=urlencode({"token": token}).encode(),
            headers={**auth, "Cookie": cookie.split(";")[0], "Origin": base,
                     "Sec-Fetch-Site": "same-origin"})
        with urllib.request.build_opener(_KeepAuth(auth)).open(request, timeout=30) as response:
            assert urlsplit(response.url).path == "/ops/celery/job/d1"
            assert "discard: failed -&gt; discarded" in response.read().decode()
        assert store.state("d1") == "discarded"
    finally:
        stop(server)
        thread.join(10)


def test_a_text_search_says_when_it_looked_at_the_newest_jobs_only(
        store: Store, web: Dashboard, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("celery_plus.admin.pages.TEXT_LIMIT", 2)
    for job_id in ("a", "b", "c"):
        store.dead(job_id)
    page = call(web, "/jobs/failed", query="text=SMTP")[2]
    assert "2 jobs, page 1 of 1" in page and 'id="searched"' in page
    [everything] = [link for link in links(page) if "search=all" in link]
    path, _, query = everything.partition("?")
    page = call(web, path, query=query)[2]
    assert "3 jobs, page 1 of 1" in page and 'id="searched"' not in page
    assert 'id="searched"' not in call(web, "/jobs/failed")[2]


def test_the_schedules_page_json_and_pause_resume(store: Store, web: Dashboard) -> None:
    store.backend.schedule_register("night<ly>", 1_796_000_000_000, "proj.report",
                                    "<crontab: 0 3 * * *>")
    status, _, page = call(web, "/schedules")
    assert status == "200 OK"
    assert "night&lt;ly&gt;" in page and "night<ly>" not in page  # escaped
    assert 'id="nav-schedules"' in page and "active" in page
    status, _, body = call(web, "/api/schedules")
    assert json.loads(body)[0]["name"] == "night<ly>"
    status, headers, _ = call(web, "/schedules/night<ly>/pause",
                              method="POST")
    assert status.startswith("303") and "paused" in headers["Location"]
    assert store.backend.schedules()[0].paused
    call(web, "/schedules/night<ly>/resume", method="POST")
    assert not store.backend.schedules()[0].paused
    assert call(web, "/schedules/nope/pause", method="POST")[0].startswith("404")
    assert call(web, "/schedules/night/explode", method="POST")[0].startswith("404")
    # Without the operator's token: no change.
    assert not call(web, "/schedules/night<ly>/pause", method="POST",
                    headers={})[0].startswith("303")
    assert not store.backend.schedules()[0].paused
