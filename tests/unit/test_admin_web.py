"""The admin's web dashboard (``celery_plus/admin/web.py``), called as a WSGI application.

Issue 5, item 6 (optional): a minimal web page over the admin API: status, listings, a job's
detail, retry / discard / cancel buttons guarded by a form token, JSON endpoints; every value
HTML-escaped. Runs on a SQLite store in the test's tmp_path.
"""

from __future__ import annotations

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
from tests.unit.test_admin_cli import Store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    app = Celery("admin-web", broker=f"plus+sqlite:///{tmp_path / 'store.db'}",
                 set_as_current=False)
    admin = connect(app)
    yield Store(app, admin.store.backend)  # type: ignore[attr-defined]
    admin.close()
    app.close()


@pytest.fixture
def web(store: Store) -> Iterator[Dashboard]:
    dashboard = make_app(store.app)
    yield dashboard
    dashboard.close()


def call(web: Dashboard, path: str, method: str = "GET", form: dict[str, str] | None = None,
         query: str = "") -> tuple[str, dict[str, str], str]:
    environ: dict[str, Any] = {"PATH_INFO": path, "REQUEST_METHOD": method,
                               "QUERY_STRING": query}
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
