"""Issue 14's defects, each against the dashboard as a WSGI application on real stores.

1. The form token is bound to the admin secret and the browser's session (signed, expiring),
   and every POST is checked for ``Origin`` / ``Sec-Fetch-Site``: a token read by another
   browser, or a POST from another origin, is refused.
2. The token is the same in every process and across restarts (two ``Dashboard`` objects =
   two processes of a multi-process server; the real ``gunicorn -w 2`` run is in
   ``tests/deploy/e2e/test_admin_cli.py``).
3. Reading needs credentials when a token is set (the admin token or the read token; the
   read token cannot act), and the ``Host`` must be an allowed one.
5. Pages are bounded: 100 dead letters of 1 MB each list in well under 1 MB of HTML on every
   store, without reading the megabytes; a job's page is capped, with links to the whole
   values; request bodies are capped.
6. Bad numbers and odd text give 400 with a message, never a 500 (every store).
7. Hidden characters show as escapes, ``?msg=`` is shown only when the dashboard signed it,
   ids containing ``/`` (and other odd ids) can be opened and acted on, and an invalid
   ``plus_admin_token`` is not echoed.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import tracemalloc
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest
from celery.exceptions import ImproperlyConfigured

from celery_plus import Celery, settings
from celery_plus.admin import connect
from celery_plus.admin.web import Dashboard, Mount, make_app
from celery_plus.model.details import clean_text
from tests.fast.conformance.stores import PG_URL
from tests.fast.unit.test_admin_cli import REDIS_URL, Store, drop_store
from tests.stores.unit.test_admin_web import ADMIN_TOKEN, basic, browser_post, browser_session, call

READ_TOKEN = "n3jGd5EYYqaJITh2FVui6LcG2cZjVbHY"
OPERATOR = basic("op", ADMIN_TOKEN)


@contextlib.contextmanager
def security_store(kind: str, tmp_path: Path) -> Iterator[Store]:
    """An app on a durable store of ``kind`` (a file, a key prefix, a schema of its own)."""
    prefix = f"s{uuid.uuid4().hex[:10]}"
    broker = {"sqlite": f"plus+sqlite:///{tmp_path / 'store.db'}",
              "redis": f"plus+{REDIS_URL}", "postgres": f"plus+{PG_URL}"}[kind]
    app = Celery("admin-security", broker=broker, set_as_current=False)
    app.conf.update(plus_key_prefix=prefix, plus_pg_schema=prefix,
                    plus_admin_token=ADMIN_TOKEN, plus_admin_read_token=READ_TOKEN)
    admin = connect(app)
    yield Store(app, admin.store.backend)  # type: ignore[attr-defined]
    admin.close()
    app.close()
    drop_store(kind, prefix)


#: Here the in-process store only; ``tests/stores/unit`` runs this module on Redis and
#: PostgreSQL.
@pytest.fixture(params=["sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    with security_store(request.param, tmp_path) as made:
        yield made


@pytest.fixture
def web(store: Store) -> Iterator[Dashboard]:
    dashboard = make_app(store.app)
    yield dashboard
    dashboard.close()


# -- 1 and 2: the form token ---------------------------------------------------------------
def test_a_form_token_read_by_another_browser_is_refused(store: Store, web: Dashboard) -> None:
    store.dead("d1")
    victim = browser_session(web, "/job/d1")
    attacker = browser_session(web, "/job/d1")
    assert victim[0] != attacker[0] and victim[1] != attacker[1]
    # the attacker's token in the victim's browser (the victim's cookie and credentials)
    status, _, text = call(web, "/job/d1/discard", "POST", {"token": attacker[1]},
                           headers={**OPERATOR, "HTTP_COOKIE": victim[0]})
    assert status == "403 Forbidden" and "form token" in text
    # the victim's own token without its cookie (another origin's page cannot send it:
    # SameSite=Strict) is refused too
    assert call(web, "/job/d1/discard", "POST", {"token": victim[1]},
                headers=OPERATOR)[0] == "403 Forbidden"
    assert store.state("d1") == "failed"
    assert browser_post(web, "/job/d1/discard", {}, victim)[0] == "303 See Other"
    assert store.state("d1") == "discarded"


def test_a_post_from_another_origin_is_refused(store: Store, web: Dashboard) -> None:
    store.dead("d1")
    session = browser_session(web, "/job/d1")
    for headers in ({"HTTP_ORIGIN": "http://evil.example:8055"},
                    {"HTTP_ORIGIN": "null"},
                    {"HTTP_ORIGIN": "http://127.0.0.1:9999", "HTTP_HOST": "127.0.0.1:8055"},
                    {"HTTP_SEC_FETCH_SITE": "cross-site"},
                    {"HTTP_SEC_FETCH_SITE": "same-site"},
                    {"HTTP_ORIGIN": "http://127.0.0.1", "HTTP_SEC_FETCH_SITE": "cross-site"},
                    # another program on the operator's machine: a loopback name is listed
                    # by default, but not on another port
                    {"HTTP_ORIGIN": "http://localhost:9999", "HTTP_HOST": "127.0.0.1:8055"},
                    {"HTTP_ORIGIN": "http://[::1]:9999", "HTTP_HOST": "localhost:8055"},
                    # ... nor on its scheme's default port, which an Origin does not spell
                    # (a browser without Sec-Fetch-Site sends only the Origin)
                    {"HTTP_ORIGIN": "http://127.0.0.1", "HTTP_HOST": "127.0.0.1:8055"},
                    {"HTTP_ORIGIN": "http://localhost", "HTTP_HOST": "127.0.0.1:8055"},
                    {"HTTP_ORIGIN": "https://[::1]", "HTTP_HOST": "[::1]:8055"}):
        status, _, text = browser_post(web, "/job/d1/discard", {}, session, **headers)
        assert status == "403 Forbidden" and "refused" in text, headers
        # a Bearer client is checked the same way
        assert call(web, "/job/d1/discard", "POST", {}, headers={
            "HTTP_AUTHORIZATION": f"Bearer {ADMIN_TOKEN}", **headers})[0] == "403 Forbidden"
    assert store.state("d1") == "failed"
    status, _, _ = browser_post(web, "/job/d1/discard", {}, session,
                                HTTP_ORIGIN="http://127.0.0.1:8055", HTTP_HOST="127.0.0.1:8055",
                                HTTP_SEC_FETCH_SITE="same-origin")
    assert status == "303 See Other" and store.state("d1") == "discarded"
    # the default port spelled out by the Host (a proxy's $host:$server_port) is the same
    store.dead("d2")
    status, _, _ = browser_post(web, "/job/d2/discard", {}, session,
                                HTTP_ORIGIN="https://localhost", HTTP_HOST="localhost:443")
    assert status == "303 See Other" and store.state("d2") == "discarded"


def test_a_token_read_without_credentials_cannot_be_replayed(store: Store,
                                                              web: Dashboard) -> None:
    """The old dashboard printed its form token on pages anyone could read: an attacker read
    it with a plain GET and replayed it from another origin through a logged-in operator's
    browser (which sends the operator's credentials)."""
    store.dead("d1")
    page = call(web, "/job/d1", headers={})[2]  # the attacker's plain GET
    token = (re.findall(r'name="token" value="([^"]+)"', page) or [""])[0]
    status, _, _ = call(web, "/job/d1/discard", "POST", {"token": token}, headers={
        **OPERATOR, "HTTP_ORIGIN": "http://evil.example", "HTTP_SEC_FETCH_SITE": "cross-site"})
    assert status == "403 Forbidden" and store.state("d1") == "failed"


def test_the_form_token_is_the_same_in_every_process_and_after_a_restart(
        store: Store) -> None:
    for job_id in ("a", "b", "c"):
        store.dead(job_id)
    first, second = make_app(store.app), make_app(store.app)  # two processes
    try:
        # the operator's browser loads a page from one process ...
        status, headers, page = call(first, "/job/a", headers=OPERATOR)
        cookie = headers.get("Set-Cookie", "").split(";")[0]
        [token] = re.findall(r'name="token" value="([^"]+)"', page)[:1]
        # ... and posts its form to the other one
        assert call(second, "/job/a/discard", "POST", {"token": token},
                    headers={**OPERATOR, "HTTP_COOKIE": cookie})[0] == "303 See Other"
        session = (cookie, token)
        assert browser_post(second, "/job/a/discard", {}, session)[0] == "303 See Other"
        assert browser_post(first, "/job/b/discard", {}, session)[0] == "303 See Other"
    finally:
        first.close()
        second.close()
    restarted = make_app(store.app)
    try:
        assert browser_post(restarted, "/job/c/discard", {}, session)[0] == "303 See Other"
    finally:
        restarted.close()
    assert [store.state(i) for i in "abc"] == ["discarded"] * 3
    # another secret (rotated): the old forms are refused
    store.app.conf.plus_admin_token = "zg441s769bwcOEaYq6YtOgQn8prGkqNj"
    rotated = make_app(store.app)
    try:
        store.dead("d")
        status, _, _ = call(rotated, "/job/d/discard", "POST", {"token": session[1]},
                            headers={**basic("op", "zg441s769bwcOEaYq6YtOgQn8prGkqNj"),
                                     "HTTP_COOKIE": session[0]})
        assert status == "403 Forbidden" and store.state("d") == "failed"
    finally:
        rotated.close()


def test_the_session_cookie_is_strict_http_only_and_scoped_to_the_mount(web: Dashboard) -> None:
    status, headers, _ = call(web, "/", headers=OPERATOR)
    assert status == "200 OK"
    cookie = headers["Set-Cookie"]
    assert re.fullmatch(r"plus_admin_session=[A-Za-z0-9_.-]{60,120}; Path=/; HttpOnly; "
                        r"SameSite=Strict", cookie), cookie
    environ_extra = {**OPERATOR, "wsgi.url_scheme": "https"}
    _, headers, _ = call(web, "/", headers=environ_extra)
    assert headers["Set-Cookie"].endswith("; Secure")
    _, headers, _ = call(web, "/", headers={**OPERATOR, "HTTP_COOKIE": cookie.split(";")[0]})
    assert "Set-Cookie" not in headers  # kept, not renewed
    assert "Set-Cookie" not in call(web, "/", headers=basic("r", READ_TOKEN))[1]
    # under a prefix, the Path is the prefix as the links spell it (percent-encoded): a
    # space or ';' in it can neither end the attribute nor leave the cookie unsent
    status, headers, page = call(Mount(web, "/ops cel;ery"), "/ops cel;ery/",
                                 headers=OPERATOR)
    assert status == "200 OK" and 'href="/ops%20cel%3Bery/jobs/failed"' in page
    assert "; Path=/ops%20cel%3Bery; HttpOnly;" in headers["Set-Cookie"]


# -- 3: reading, the read token, allowed hosts ----------------------------------------------
def test_reading_needs_a_token_and_the_read_token_cannot_act(store: Store,
                                                             web: Dashboard) -> None:
    store.dead("d1", args=["secret-argument"])
    for path in ("/", "/jobs/failed", "/job/d1", "/api/job/d1", "/api/jobs/failed",
                 "/api/status", "/metrics", "/workers", "/failed"):
        status, headers, text = call(web, path, headers={})
        assert status == "401 Unauthorized", path
        assert headers["WWW-Authenticate"].startswith("Basic "), path
        assert "secret-argument" not in text
        assert call(web, path, headers=basic("x", "wrong-token-0123456789"))[0] == (
            "401 Unauthorized")
        assert call(web, path, headers=basic("viewer", READ_TOKEN))[0] == "200 OK", path
        assert call(web, path, headers={"HTTP_AUTHORIZATION": f"Bearer {READ_TOKEN}"})[0] == (
            "200 OK"), path
    page = call(web, "/job/d1", headers=basic("viewer", READ_TOKEN))[2]
    assert "secret-argument" in page and 'name="token"' not in page  # no forms for readers
    status, _, _ = call(web, "/job/d1/discard", "POST", {},
                        headers={"HTTP_AUTHORIZATION": f"Bearer {READ_TOKEN}"})
    assert status == "401 Unauthorized" and store.state("d1") == "failed"


def test_public_read_opens_the_pages_and_login_asks_for_the_operator(store: Store) -> None:
    store.dead("d1")
    web = make_app(store.app, public_read=True)
    try:
        status, headers, page = call(web, "/job/d1", headers={})
        assert status == "200 OK" and 'name="token"' not in page and "Set-Cookie" not in headers
        assert call(web, "/job/d1/discard", "POST", {}, headers={})[0] == "401 Unauthorized"
        status, headers, _ = call(web, "/login", headers={})
        assert status == "401 Unauthorized" and "WWW-Authenticate" in headers
        for query in ("", "next=https://evil.example/", "next=//evil.example",
                      "msg=x&sig=y&next=/%2F%2Fevil.example"):
            # the dashboard's own root, whatever the link said (no open redirect)
            status, headers, _ = call(web, "/login", query=query, headers=OPERATOR)
            assert status == "303 See Other" and headers["Location"] == "/", query
    finally:
        web.close()


def test_only_allowed_hosts_are_answered(store: Store, web: Dashboard) -> None:
    for host in ("127.0.0.1:8055", "localhost", "[::1]:8055", "LOCALHOST:1", "localhost.",
                 "localhost.:8055"):
        assert call(web, "/api/status", headers={**OPERATOR, "HTTP_HOST": host})[0] == (
            "200 OK"), host
    for host in ("evil.example", "evil.example:8055", "127.0.0.1.evil.example", "a b",
                 "evil.example.", "localhost..", "[::1].",
                 "x\r\nSet-Cookie: a=b"):
        status, _, text = call(web, "/api/status", headers={**OPERATOR, "HTTP_HOST": host})
        assert status == "400 Bad Request", host
        assert "Host" in text or "plus_admin_allowed_hosts" in text
    store.app.conf.plus_admin_allowed_hosts = [".example.com"]
    listed = make_app(store.app)
    try:
        for host, status in (("ops.example.com", "200 OK"), ("example.com:443", "200 OK"),
                             ("ops.example.com.:443", "200 OK"),
                             ("127.0.0.1", "400 Bad Request"),
                             ("evilexample.com", "400 Bad Request")):
            assert call(listed, "/api/status", headers={**OPERATOR, "HTTP_HOST": host})[0] == (
                status), host
        # an Origin naming a listed host is the dashboard's own (behind a proxy that
        # rewrites Host, the browser's origin is the public name)
        store.dead("d1")
        session = browser_session_on(listed, "ops.example.com")
        status, _, _ = browser_post(listed, "/job/d1/discard", {}, session,
                                    HTTP_HOST="ops.example.com",
                                    HTTP_ORIGIN="https://ops.example.com")
        assert status == "303 See Other"
    finally:
        listed.close()


def test_a_proxys_public_origin_is_accepted_on_the_upstream_host(store: Store) -> None:
    """Behind a proxy that does not pass the public ``Host`` on, the browser's origin is the
    listed public name (on any port) and the request's Host the upstream address."""
    store.dead("d1")
    store.app.conf.plus_admin_allowed_hosts = ["ops.example.com", "127.0.0.1"]
    listed = make_app(store.app)
    try:
        session = browser_session_on(listed, "127.0.0.1:8055")
        for origin, status in (("http://localhost:9999", "403 Forbidden"),
                               ("https://ops.example.com:8443", "303 See Other")):
            assert browser_post(listed, "/job/d1/discard", {}, session,
                                HTTP_HOST="127.0.0.1:8055", HTTP_ORIGIN=origin)[0] == status
    finally:
        listed.close()


def test_secrets_are_compared_as_fixed_length_digests(store: Store, web: Dashboard,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A constant-time compare of values of different lengths returns at once, telling the
    secret's length: every compare of a secret is of two equal-length digests, whatever was
    presented. (Form tokens and message signatures are itsdangerous signatures, of a fixed
    and public length.)"""
    import hmac
    import types

    from celery_plus.admin import security

    compare = hmac.compare_digest
    lengths: list[tuple[int, int]] = []

    def recording(a: bytes, b: bytes) -> bool:
        lengths.append((len(a), len(b)))
        return compare(a, b)

    monkeypatch.setattr(security, "hmac", types.SimpleNamespace(compare_digest=recording))
    store.dead("d1")
    cookie, _ = browser_session(web, "/job/d1")
    for wrong in ("x", "y" * 200):
        call(web, "/api/status", headers={"HTTP_AUTHORIZATION": f"Bearer {wrong}"})
        call(web, "/api/status", headers=basic("op", wrong))
        call(web, "/job/d1/discard", "POST", {"token": wrong},
             headers={**OPERATOR, "HTTP_COOKIE": cookie})
        call(web, "/job/d1", query=f"msg=hello&sig={wrong}", headers=OPERATOR)
    assert store.state("d1") == "failed"
    assert lengths and all(a == b for a, b in lengths), lengths


def browser_session_on(web: Dashboard, host: str) -> tuple[str, str]:
    status, headers, page = call(web, "/jobs/failed", headers={**OPERATOR, "HTTP_HOST": host})
    assert status == "200 OK", page
    [token] = re.findall(r'name="token" value="([^"]+)"', page)[:1]
    return headers["Set-Cookie"].split(";", 1)[0], token


def test_secrets_are_never_echoed_and_must_differ() -> None:
    for name in ("plus_admin_token", "plus_admin_read_token"):
        for bad in ("short-Secret", "has a space in the middle!", "\x1b]0;pwned\x07abcdefghijkl"):
            with pytest.raises(ImproperlyConfigured, match=name) as caught:
                settings.resolve({name: bad})
            assert bad not in str(caught.value) and "hidden" in str(caught.value)
    with pytest.raises(ImproperlyConfigured, match="same secret"):
        settings.resolve({"plus_admin_token": ADMIN_TOKEN, "plus_admin_read_token": ADMIN_TOKEN})
    with pytest.raises(ImproperlyConfigured, match="plus_admin_allowed_hosts"):
        settings.resolve({"plus_admin_allowed_hosts": "localhost"})


# -- 5: bounded pages ----------------------------------------------------------------------
MB = 1_000_000


def test_a_hundred_dead_letters_of_a_megabyte_list_in_under_a_megabyte(
        store: Store, web: Dashboard) -> None:
    for n in range(100):  # 1 MB errors; the newest five also carry 1 MB of arguments
        store.dead(f"big-{n:03}", error="E" * MB, args=["A" * MB] if n >= 95 else [n])
    tracemalloc.start()
    try:
        status, _, page = call(web, "/jobs/failed", query="per_page=100")
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert status == "200 OK" and page.count('href="/job/big-') == 100
    assert len(page.encode()) < MB // 4, len(page)
    assert peak < 30 * MB, f"listing 100 x 1 MB dead letters peaked at {peak / MB:.0f} MB"
    # the same through the JSON API and the other listings' paths
    for query in ("task=proj.mail&per_page=100", "queue=celery&per_page=100",
                  "sort=oldest&per_page=100", "text=zzz-nothing&per_page=100"):
        status, _, page = call(web, "/jobs/failed", query=query)
        assert status == "200 OK" and len(page.encode()) < MB // 4, query
    data = call(web, "/api/jobs/failed", query="per_page=100")[2]
    assert len(data.encode()) < MB // 2
    # the 1 MB arguments were not read for the preview; the error was cut by the store
    [first, *_] = json.loads(data)["items"]
    assert first["args_repr"].startswith("(a message of 2,")
    assert first["exc_message"] == "E" * 1000 + "..."


def test_a_job_page_is_capped_and_links_to_the_whole_values(store: Store, web: Dashboard) -> None:
    store.dead("big", error="E" * MB, args=["A" * MB])
    status, _, page = call(web, "/job/big")
    assert status == "200 OK" and len(page.encode()) < 200_000
    links = dict.fromkeys(re.findall(r'href="(/job/big\?raw=[a-z]+)"', page))
    assert {"/job/big?raw=args", "/job/big?raw=error", "/job/big?raw=traceback"} <= set(links)
    status, headers, raw = call(web, "/job/big", query="raw=args")
    assert status == "200 OK" and headers["Content-Type"].startswith("text/plain")
    assert json.loads(raw) == ["A" * MB]
    # the whole error as the store keeps it (one detail is capped: transport/details.py)
    assert call(web, "/job/big", query="raw=error")[2] == "ConnectionError: " + clean_text(
        "E" * MB)
    assert call(web, "/job/big", query="raw=nonsense")[0] == "400 Bad Request"


def test_request_bodies_are_capped_and_content_length_is_checked(store: Store,
                                                                 web: Dashboard) -> None:
    store.dead("d1")

    class NoMoreThan(io.BytesIO):
        """A socket's stream: reading past what was sent would block the server."""

        def read(self, size: int | None = -1) -> bytes:
            assert size is not None and 0 <= size <= len(self.getvalue()), size
            return super().read(size)

    for length, status in (("-1", "400 Bad Request"), ("1e3", "400 Bad Request"),
                           ("99999999999999999999", "400 Bad Request"),
                           (str(10**7), "413 Content Too Large"), (" 12 ", "303 See Other")):
        environ = {"PATH_INFO": "/job/d1/retry", "REQUEST_METHOD": "POST",
                   "QUERY_STRING": "", "HTTP_AUTHORIZATION": f"Bearer {ADMIN_TOKEN}",
                   "HTTP_HOST": "127.0.0.1", "CONTENT_LENGTH": length,
                   "wsgi.input": NoMoreThan(b"confirm=1&x=")}
        got: dict[str, str] = {}
        web(environ, lambda s, h, got=got: got.update(status=s))
        assert got["status"] == status, length


# -- 6: bad numbers, odd text ---------------------------------------------------------------
BAD_QUERIES = [
    "page=99999999999999999999", "page=0", "page=-1", "page=1.5", "page=%00",
    "per_page=100000", "per_page=0", "per_page=abc", "older_than=99999999999999999999d",
    "older_than=-5m", "older_than=%00", "since=99999999-01-01", "until=%1b[2J",
    "task=a%00b", "queue=%00", "text=%00", "sort=sideways", "search=some", "refresh=-1",
    "refresh=99999999999999", "task=" + "x" * 5000,
]


@pytest.mark.parametrize("query", BAD_QUERIES)
def test_a_bad_parameter_is_a_400_with_a_message(store: Store, web: Dashboard, query: str
                                                 ) -> None:
    for path in ("/jobs/failed", "/api/jobs/failed"):
        status, _, text = call(web, path, query=query)
        assert status == "400 Bad Request", (path, query, text[:300])
        assert "Traceback" not in text and len(text) < 1000 and "\x1b" not in text
    for path in ("/", "/api/activity"):
        assert call(web, path, query="range=forever")[0] == "400 Bad Request"


def test_odd_ids_are_400_or_404_never_500(store: Store, web: Dashboard) -> None:
    for quoted in ("a%00b", "x" * 5000, "%FF", "%ED%B3%BF"):
        for path in (f"/job/{quoted}", f"/api/job/{quoted}", f"/job/{quoted}/retry"):
            method = "POST" if path.endswith("/retry") else "GET"
            status = call(web, wsgi_path(path), method, {} if method == "POST" else None)[0]
            assert status in ("400 Bad Request", "404 Not Found"), (path[:20], status)


# -- 7: what a page shows --------------------------------------------------------------------
SLASHED_IDS = ["a/b", "x/retry", "/lead", "trail/", ".", "..", "ünïcödé", "a b?c#d%2F", "a//b"]


def wsgi_path(url_path: str) -> str:
    """PATH_INFO as a WSGI server gives it for ``url_path``: percent-decoded, latin-1."""
    from urllib.parse import unquote_to_bytes

    return unquote_to_bytes(url_path).decode("latin-1")


@pytest.mark.parametrize("job_id", SLASHED_IDS)
def test_ids_with_slashes_and_odd_characters_open_and_act(store: Store, web: Dashboard,
                                                          job_id: str) -> None:
    store.dead(job_id)
    page = call(web, "/jobs/failed", headers=OPERATOR)[2]
    [href] = [h for h in re.findall(r'<a href="(/job[^"]*)">', page)]
    path, _, query = href.replace("&amp;", "&").partition("?")
    status, _, job_page = call(web, wsgi_path(path), query=query, headers=OPERATOR)
    assert status == "200 OK", (href, job_page[:200])
    assert f"<title>job {job_id}</title>".replace("&", "&amp;") in job_page or job_id in job_page
    [action] = re.findall(r'<form method="post" action="([^"]*/discard[^"]*)"', job_page)
    path, _, query = action.replace("&amp;", "&").partition("?")
    cookie, token = browser_session(web)
    status, headers, _ = call(web, wsgi_path(path), "POST", {"token": token}, query=query,
                              headers={**OPERATOR, "HTTP_COOKIE": cookie})
    assert status == "303 See Other", (action, status)
    assert store.state(job_id) == "discarded"
    location = headers["Location"]
    path, _, query = location.partition("?")
    page = call(web, wsgi_path(path), query=query, headers=OPERATOR)[2]
    assert "discard: failed -&gt; discarded" in page


def test_hidden_characters_show_as_escapes_and_messages_must_be_signed(
        store: Store, web: Dashboard) -> None:
    rlo = "\u202e"
    store.dead("odd", task=f"proj.{rlo}gpj.exe", queue="q\x1b[2J", error=f"bad{rlo}txt.exe\x07")
    for path in ("/jobs/failed", "/job/odd", "/"):
        page = call(web, path, headers=OPERATOR)[2]
        assert rlo not in page and "\x1b" not in page and "\x07" not in page, path
        assert '<span class="esc">\\x1b</span>[2J' in page, path
        if path != "/":
            assert '<span class="esc">\\u202e</span>' in page, path
    # the tab's title is text: the escape is spelled out there, not markup shown as text
    store.dead(f"odd{rlo}<b>", error="x")
    page = call(web, wsgi_path(f"/job/odd{rlo}<b>"), headers=OPERATOR)[2]
    assert "<title>job odd\\u202e&lt;b&gt;</title>" in page, page[:300]
    page = call(web, "/job/odd", headers=OPERATOR,
                query=urlencode({"msg": "Your session expired: sign in at evil.example"}))[2]
    assert "evil.example" not in page and 'id="msg"' not in page


def test_the_operator_feature_pages_escape_what_workers_and_beat_report(
        store: Store, web: Dashboard, monkeypatch: pytest.MonkeyPatch) -> None:
    """Node and host names, queues and schedule entries come from workers and beat configs,
    not from the dashboard: the workers page, its confirmation pages and the schedules page
    show them as text."""
    from celery_plus.admin import workers
    from celery_plus.admin.workers import WorkerView

    evil = '"><script>alert(1)</script><img src=x onerror=alert(2)>\u202e'
    view = WorkerView(node=f"w{evil}@h", host=f"h{evil}", pid=7, jobs=1,
                      lease_deadline_ms=1, last_heartbeat_ms=1, queues=[f"q{evil}"])
    monkeypatch.setattr(workers, "workers", lambda admin, now_ms=None: [view])
    store.backend.schedule_register(f"n{evil}", 1_796_000_000_000, f"t{evil}", f"s{evil}")
    pages = [call(web, "/workers", headers=OPERATOR)[2], call(web, "/schedules")[2]]
    session = browser_session(web, "/workers")
    for action in ("stop", "shutdown"):
        status, _, page = browser_post(web, f"/workers/{view.node}/{action}", {}, session)
        assert status == "200 OK" and 'id="confirm"' in page, page[:300]
        pages.append(page)
    for page in pages:
        assert "<script" not in page and "<img" not in page
        assert "&lt;script&gt;" in page and '<span class="esc">\\u202e</span>' in page


def test_a_head_request_gets_the_headers_and_no_body(store: Store, web: Dashboard) -> None:
    store.dead("d1")
    for path in ("/", "/jobs/failed", "/job/d1", "/metrics", "/nowhere"):
        get_status, get_headers, _ = call(web, path, headers=OPERATOR)
        status, headers, body = call(web, path, "HEAD", headers=OPERATOR)
        assert status == get_status and body == "", path
        assert headers["Content-Length"] == get_headers["Content-Length"] != "0", path


def test_every_answer_forbids_framing_caching_and_sniffing(store: Store, web: Dashboard) -> None:
    """Clickjacking, a shared cache keeping an operator's page, a browser sniffing a job's
    text as HTML: refused by the headers of every answer, errors and redirects included."""
    store.dead("d1")
    session = browser_session(web, "/job/d1")
    answers = {
        "page": call(web, "/job/d1", headers=OPERATOR),
        "json": call(web, "/api/job/d1", headers=OPERATOR),
        "metrics": call(web, "/metrics", headers=OPERATOR),
        "raw": call(web, "/job/d1", query="raw=args", headers=OPERATOR),
        "redirect": browser_post(web, "/job/d1/retry", {}, session),
        "bad host": call(web, "/", headers={**OPERATOR, "HTTP_HOST": "evil.example"}),
        "no credentials": call(web, "/", headers={}),
        "cross-site": call(web, "/job/d1/discard", "POST", {}, headers={
            **OPERATOR, "HTTP_SEC_FETCH_SITE": "cross-site"}),
        "not found": call(web, "/job/nope", headers=OPERATOR),
    }
    statuses = {name: status[:3] for name, (status, _, _) in answers.items()}
    assert statuses == {"page": "200", "json": "200", "metrics": "200", "raw": "200",
                        "redirect": "303", "bad host": "400", "no credentials": "401",
                        "cross-site": "403", "not found": "404"}
    for name, (_, headers, _) in answers.items():
        assert headers["Cache-Control"] == "no-store", name
        assert headers["X-Frame-Options"] == "DENY", name
        assert "frame-ancestors 'none'" in headers["Content-Security-Policy"], name
        assert "default-src 'none'" in headers["Content-Security-Policy"], name
        assert headers["X-Content-Type-Options"] == "nosniff", name
        assert headers["Referrer-Policy"] == "same-origin", name
    assert answers["raw"][1]["Content-Type"].startswith("text/plain")


@pytest.mark.parametrize("broker", ["plus+redis://127.0.0.1:1/0",
                                    "plus+postgresql://root@127.0.0.1:1/test"])
def test_a_store_that_cannot_be_reached_is_a_503(broker: str) -> None:
    app = Celery("down", broker=broker, set_as_current=False)
    web = make_app(app)
    try:
        for path in ("/", "/jobs/failed", "/job/x", "/metrics", "/api/status"):
            status, _, text = call(web, path, headers={})
            assert status == "503 Service Unavailable", (path, status, text[:200])
            assert text.startswith("the store cannot be reached: "), text
    finally:
        web.close()
        app.close()
