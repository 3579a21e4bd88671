"""The admin's web dashboard (``celery_plus/admin/web.py``), called as a WSGI application.

Issue 5, item 6 (optional): a minimal web page over the admin API: status, listings, a job's
detail, retry / discard / cancel buttons guarded by a form token, JSON endpoints; every value
HTML-escaped. Runs on a SQLite store in the test's tmp_path.
"""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode
from wsgiref.util import setup_testing_defaults

import pytest

from celery_plus import Celery
from celery_plus.admin import connect
from celery_plus.admin.web import Dashboard, make_app
from celery_plus.transport.backend import NewJob
from tests.unit.test_admin_cli import Store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    app = Celery("admin-web", broker=f"plus+sqlite:///{tmp_path / 'store.db'}",
                 set_as_current=False)
    admin = connect(app)
    yield Store(app, admin.store.backend)  # type: ignore[attr-defined]
    admin.close()
    app.close()


ADMIN_TOKEN = "s3cret-admin-token-for-tests"
BEARER = {"HTTP_AUTHORIZATION": f"Bearer {ADMIN_TOKEN}"}


@pytest.fixture
def web(store: Store) -> Iterator[Dashboard]:
    dashboard = make_app(store.app, admin_token=ADMIN_TOKEN)
    yield dashboard
    dashboard.close()


def call(web: Dashboard, path: str, method: str = "GET", form: dict[str, str] | None = None,
         query: str = "", headers: dict[str, str] | None = None
         ) -> tuple[str, dict[str, str], str]:
    environ: dict[str, Any] = {"PATH_INFO": path, "REQUEST_METHOD": method,
                               "QUERY_STRING": query,
                               **(BEARER if headers is None and method == "POST"
                                  else headers or {})}
    body = urlencode(form or {}).encode()
    environ["wsgi.input"] = io.BytesIO(body)
    environ["CONTENT_LENGTH"] = str(len(body))
    setup_testing_defaults(environ)
    got: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]]) -> None:
        got["status"], got["headers"] = status, dict(headers)

    data = b"".join(web(environ, start_response))
    return got["status"], got["headers"], data.decode()


def test_the_status_page_shows_counts_queues_and_groups(store: Store, web: Dashboard) -> None:
    store.dead("f1", queue="mail")
    store.job("run", concurrency_group="g", concurrency_limit=1)
    store.backend.claim(["celery"], "w", 1)
    status, headers, page = call(web, "/")
    assert status == "200 OK" and headers["Content-Type"].startswith("text/html")
    assert "dead letters: <a href='/jobs/failed'>1</a>" in page
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
    assert 'action="/job/job-1/retry"' in page and "Traceback" in page
    assert call(web, "/job/job-1/retry", "POST", {})[0] == "403 Forbidden"
    assert store.state("job-1") == "failed"
    status, headers, _ = call(web, "/job/job-1/retry", "POST", {"token": web.token})
    assert status == "303 See Other" and headers["Location"].startswith("/job/job-1?msg=")
    assert store.state("job-1") == "enqueued"
    status, _, page = call(web, "/job/job-1", query=headers["Location"].split("?", 1)[1])
    assert "retry: failed -&gt; enqueued" in page and 'action="/job/job-1/cancel"' in page
    status, headers, _ = call(web, "/job/job-1/retry", "POST", {"token": web.token})
    assert status == "303 See Other" and "nothing+to+retry" in headers["Location"]


def test_conflicts_unknown_jobs_and_pages(store: Store, web: Dashboard) -> None:
    store.dead("a", unique_lock="K", unique_window="running")
    store.job("holder", unique_lock="K", unique_window="running")
    status, _, text = call(web, "/job/a/retry", "POST", {"token": web.token})
    assert status == "409 Conflict" and "held by job 'holder'" in text
    assert call(web, "/job/nope")[0] == "404 Not Found"
    assert call(web, "/api/job/nope")[0] == "404 Not Found"
    assert call(web, "/job/nope/discard", "POST", {"token": web.token})[0] == "404 Not Found"
    assert call(web, "/elsewhere")[0] == "404 Not Found"
    assert call(web, "/", "DELETE")[0] == "405 Method Not Allowed"


def basic(user: str, password: str) -> dict[str, str]:
    raw = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"HTTP_AUTHORIZATION": f"Basic {raw}"}


def test_posts_need_the_admin_token_from_the_settings(store: Store, tmp_path: Path) -> None:
    store.dead("d1")
    read_only = make_app(store.app)  # plus_admin_token not set: read-only
    try:
        assert read_only.admin_token is None
        status, _, text = call(read_only, "/job/d1/retry", "POST", {"token": read_only.token})
        assert status == "403 Forbidden" and "plus_admin_token" in text
        page = call(read_only, "/job/d1")[2]
        assert "read-only" in page and 'action="/job/d1/retry"' not in page
    finally:
        read_only.close()
    store.app.conf.plus_admin_token = ADMIN_TOKEN
    web = make_app(store.app)
    try:
        assert web.admin_token == ADMIN_TOKEN
        form = {"token": web.token}
        for headers in ({}, {"HTTP_AUTHORIZATION": "Bearer wrong-token-of-some-length"},
                        basic("admin", "nope"), {"HTTP_AUTHORIZATION": "Basic !!!"}):
            status, got, text = call(web, "/job/d1/retry", "POST", form, headers=headers)
            assert status == "401 Unauthorized" and "plus_admin_token" in text
            assert got["WWW-Authenticate"].startswith("Basic ")
        assert store.state("d1") == "failed"
        # the right credentials but no form token: still refused (cross-site guard)
        assert call(web, "/job/d1/retry", "POST", {}, headers=basic("x", ADMIN_TOKEN))[0] == (
            "403 Forbidden")
        status, _, _ = call(web, "/job/d1/retry", "POST", form, headers=basic("any", ADMIN_TOKEN))
        assert status == "303 See Other" and store.state("d1") == "enqueued"
        # GET pages need no credentials
        assert call(web, "/job/d1", headers={})[0] == "200 OK"
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
    lines = text.splitlines()
    assert "# TYPE celery_plus_jobs gauge" in lines
    assert 'celery_plus_jobs{state="failed"} 2' in lines
    assert 'celery_plus_jobs{state="enqueued"} 2' in lines
    assert 'celery_plus_queue_jobs{queue="mail",state="failed"} 2' in lines
    assert 'celery_plus_queue_jobs{queue="we\\"ird",state="enqueued"} 1' in lines
    assert "celery_plus_dead_letters 2" in lines
    assert "celery_plus_dead_lettered_total 2" in lines
    assert "celery_plus_deduplicated_total 1" in lines
    for name in ("recovered", "deduplicated", "blocked"):
        assert f"# TYPE celery_plus_{name}_total counter" in lines
    for line in lines:
        assert line.startswith("#") or line.rsplit(" ", 1)[1].replace(".", "").isdigit(), line


def test_a_bad_admin_token_setting_stops_the_dashboard(store: Store, tmp_path: Path) -> None:
    from celery.exceptions import ImproperlyConfigured

    store.app.conf.plus_admin_token = "too short"
    with pytest.raises(ImproperlyConfigured, match="plus_admin_token"):
        make_app(store.app)
    url_only = make_app(f"plus+sqlite:///{tmp_path / 'store.db'}")  # a URL: no settings
    try:
        assert url_only.admin_token is None
        assert call(url_only, "/job/x/retry", "POST", {"token": url_only.token})[0] == (
            "403 Forbidden")
    finally:
        url_only.close()
