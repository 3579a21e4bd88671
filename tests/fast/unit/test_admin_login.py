"""Login that holds (issue #28): failed logins throttled and logged, weak secrets refused at
start-up, log-out, sessions and form tokens that expire — the dashboard as a WSGI
application on the embedded store."""

from __future__ import annotations

import io
import logging
import secrets
from typing import Any
from urllib.parse import urlencode
from wsgiref.util import setup_testing_defaults

import pytest
from celery.exceptions import ImproperlyConfigured
from freezegun import freeze_time
from hypothesis import given
from hypothesis import settings as settings_profile
from hypothesis import strategies as st

from celery_plus import Celery, settings
from celery_plus.admin.security import LOGGED_OUT_COOKIE, SESSION_COOKIE
from celery_plus.admin.sessions import FORM_MAX_AGE, SESSION_MAX_AGE
from celery_plus.admin.throttle import MAX_FAILURES, MAX_TOTAL
from celery_plus.admin.web import Dashboard
from tests.fast.unit import test_admin_web_security as security
from tests.fast.unit.test_admin_cli import Store
from tests.stores.unit.test_admin_web import basic, browser_post, browser_session, call

GUESSER, OTHER = "127.0.0.9", "127.0.0.8"
OPERATOR = security.OPERATOR
OPERATOR_BEARER = {"HTTP_AUTHORIZATION": f"Bearer {security.ADMIN_TOKEN}"}
READER = basic("viewer", security.READ_TOKEN)
#: The security tests' fixtures: an app with both secrets on SQLite, and its dashboard.
store, web = security.store, security.web


def answer(web: Dashboard, path: str, headers: dict[str, str], method: str = "GET",
           form: dict[str, str] | None = None) -> tuple[str, list[tuple[str, str]], str]:
    """A request's status, every header (``Set-Cookie`` may come twice) and text."""
    body = urlencode(form or {}).encode()
    environ: dict[str, Any] = {"PATH_INFO": path, "REQUEST_METHOD": method, "QUERY_STRING": "",
                               "SCRIPT_NAME": "", "wsgi.input": io.BytesIO(body),
                               "CONTENT_LENGTH": str(len(body)), **headers}
    setup_testing_defaults(environ)
    got: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]]) -> None:
        got["status"], got["headers"] = status, headers

    text = b"".join(web(environ, start_response)).decode()
    return got["status"], got["headers"], text


def set_cookies(headers: list[tuple[str, str]]) -> dict[str, str]:
    """Cookie name -> its whole ``Set-Cookie`` value."""
    return {v.split("=", 1)[0]: v for k, v in headers if k == "Set-Cookie"}


def test_failures_are_limited_per_address_but_valid_credentials_never(
        web: Dashboard, caplog: pytest.LogCaptureFixture) -> None:
    wrong = {**basic("op", "not-the-secret-at-all"), "REMOTE_ADDR": GUESSER}
    with caplog.at_level(logging.WARNING, "celery_plus.admin.web"):
        for _ in range(MAX_FAILURES):
            assert call(web, "/api/status", headers=wrong)[0] == "401 Unauthorized"
        status, headers, text = call(web, "/api/status", headers=wrong)
        bearer = call(web, "/api/status", headers={
            "HTTP_AUTHORIZATION": "Bearer not-the-secret-at-all", "REMOTE_ADDR": GUESSER})
    # Basic: 401 with the challenge, so a browser that holds a mistyped token asks again
    # (Chromium keeps a 429's credentials); Bearer: 429
    assert status == "401 Unauthorized" and int(headers["Retry-After"]) > 0, text
    assert headers["WWW-Authenticate"].startswith("Basic") and "too many failed" in text
    assert bearer[0] == "429 Too Many Requests" and "WWW-Authenticate" not in bearer[1]
    failed = [r.getMessage() for r in caplog.records if "failed login" in r.getMessage()]
    assert len(failed) == MAX_FAILURES + 2 and GUESSER in failed[-1], failed
    assert "refused" in failed[-2] and "refused" not in failed[-3]
    assert "not-the-secret" not in caplog.text  # (the guess itself is never logged)
    # the operator behind the same address (ssh -L: 127.0.0.1) is never refused: Bearer,
    # a new browser's Basic at /login, and a reader's scrape
    same = {"REMOTE_ADDR": GUESSER}
    assert call(web, "/api/status", headers={**OPERATOR_BEARER, **same})[0] == "200 OK"
    assert call(web, "/login", headers={**OPERATOR, **same})[0] == "303 See Other"
    assert call(web, "/metrics", headers={**READER, **same})[0] == "200 OK"
    assert "too many failed" in call(web, "/api/status", headers=wrong)[2]
    assert "too many failed" not in call(web, "/api/status",
                                         headers={**wrong, "REMOTE_ADDR": OTHER})[2]


def test_failures_from_rotating_addresses_are_limited_in_total(web: Dashboard) -> None:
    statuses = []
    for n in range(MAX_TOTAL + 20):  # below the per-address limit at every address
        address = f"127.0.{n // (MAX_FAILURES - 1)}.{n % (MAX_FAILURES - 1) + 1}"
        statuses.append(call(web, "/api/status", headers={
            "HTTP_AUTHORIZATION": f"Bearer guess-{n}-xxxxxxxxxxxxxxxx",
            "REMOTE_ADDR": address})[0])
    assert set(statuses[:MAX_TOTAL]) == {"401 Unauthorized"}
    assert set(statuses[MAX_TOTAL:]) == {"429 Too Many Requests"}
    assert call(web, "/api/status", headers={**OPERATOR_BEARER, "REMOTE_ADDR": "10.9.9.9"}
                )[0] == "200 OK"


#: Guessable in far fewer than 1e14 tries, though 16 characters or more, 8 different; the
#: second line is made of the project's words (zxcvbn alone put them at 1e15-1e19 guesses).
WEAK = ["1234567812345678", "abcdefghabcdefgh", "0123456789abcdef", "password12345678",
        "qwertyuiopasdfgh", 40 * "a" + "bcdefgh", "aaaaaaaaaaaaaaaaaaaa", "1234512345123451",
        "celery-plus-admin-token", "plus_admin_token_2026", "secret-token-for-admin",
        "prod-admin-token-01", "staging-admin-token", "CeleryPlusAdmin2026",
        "operator-token-0123456789abcdef", "Celery.Plus.Dashboard.Reader"]


@pytest.mark.parametrize("weak", WEAK)
def test_a_weak_secret_fails_at_start_up_naming_the_setting_and_the_fix(weak: str) -> None:
    for name in ("plus_admin_token", "plus_admin_read_token"):
        with pytest.raises(ImproperlyConfigured, match=name) as caught:
            settings.resolve({name: weak})
        text = str(caught.value)
        assert weak not in text and "secrets.token_urlsafe(32)" in text, text
    # named as the configuration spells it
    app = Celery("weak", broker="memory://", set_as_current=False)
    app.config_from_object({"CELERY_PLUS_ADMIN_TOKEN": weak}, namespace="CELERY")
    with pytest.raises(ImproperlyConfigured, match="Setting CELERY_PLUS_ADMIN_TOKEN="):
        app.plus_config()


@settings_profile(max_examples=50, deadline=None)
@given(st.integers(16, 64), st.booleans())
def test_random_secrets_pass(size: int, hexadecimal: bool) -> None:
    token = secrets.token_hex(size) if hexadecimal else secrets.token_urlsafe(size)
    assert settings.resolve({"plus_admin_token": token}).admin_token == token
    assert settings.resolve({"plus_admin_token": "Xk2-pq9_Lm4.zR7w"}).admin_token


def test_log_out_challenges_the_browser_s_cached_credentials(store: Store,
                                                             web: Dashboard) -> None:
    store.dead("d1")
    cookie, token = browser_session(web)
    status, headers, _ = answer(web, "/logout", {**OPERATOR, "HTTP_COOKIE": cookie}, "POST",
                                {"token": token})
    marks = set_cookies(headers)
    assert status == "200 OK" and "Max-Age=0" in marks[SESSION_COOKIE], headers
    mark = marks[LOGGED_OUT_COOKIE]
    assert "Max-Age" not in mark and "SameSite=Lax" in mark  # (until the browser closes)
    # the browser re-sends its cached Basic credentials with the mark: challenged, mark
    # cleared, so it forgets them and asks
    out = mark.split(";", 1)[0]
    for path in ("/failed", "/login"):
        status, headers, text = answer(web, path, {**OPERATOR, "HTTP_COOKIE": out})
        assert status == "401 Unauthorized" and "logged out" in text, (path, text)
        assert dict(headers)["WWW-Authenticate"].startswith("Basic")
        assert "Max-Age=0" in set_cookies(headers)[LOGGED_OUT_COOKIE]
    # the old session's cookie (kept, or put back) is challenged too, and posts nothing
    status, headers, text = answer(web, "/failed", {**OPERATOR, "HTTP_COOKIE": cookie})
    assert status == "401 Unauthorized" and "WWW-Authenticate" in dict(headers)
    assert "Max-Age=0" in set_cookies(headers)[SESSION_COOKIE]
    assert browser_post(web, "/job/d1/discard", {}, (cookie, token))[0] == "401 Unauthorized"
    assert store.state("d1") == "failed"
    # the credentials typed at the prompt come without mark nor cookie: a new session
    status, headers, _ = answer(web, "/login", OPERATOR)
    assert status == "303 See Other"
    fresh = set_cookies(headers)[SESSION_COOKIE].split(";", 1)[0]
    assert fresh != cookie
    status, _, page = call(web, "/job/d1", headers={**OPERATOR, "HTTP_COOKIE": fresh})
    assert status == "200 OK" and 'id="logout"' in page
    # a log-out is a form of the dashboard's own: without its token it is refused
    assert call(web, "/logout", "POST", {}, headers={**OPERATOR, "HTTP_COOKIE": fresh})[0] == \
        "403 Forbidden"
    # Bearer clients are never challenged by a mark (no browser caches them)
    assert call(web, "/api/status", headers={**OPERATOR_BEARER, "HTTP_COOKIE": out})[0] == \
        "200 OK"


def test_clients_without_a_session_cookie_are_unaffected(web: Dashboard) -> None:
    for headers in (OPERATOR, READER, OPERATOR_BEARER) * 2:  # (curl, scripts)
        status, answered, _ = answer(web, "/api/status", headers)
        assert status == "200 OK" and "WWW-Authenticate" not in dict(answered)


def test_sessions_and_form_tokens_expire(store: Store, web: Dashboard) -> None:
    store.dead("d1")
    store.dead("d2")
    with freeze_time("2026-12-07 10:00:00") as clock:
        session = browser_session(web)
        clock.tick(FORM_MAX_AGE + 1)
        status, _, text = browser_post(web, "/job/d1/discard", {}, session)
        assert status == "403 Forbidden" and "expired form token" in text
        assert store.state("d1") == "failed"
        clock.tick(SESSION_MAX_AGE - FORM_MAX_AGE)
        cookie, _ = session
        # the expired cookie with the browser's cached Basic credentials: challenged (the
        # browser forgets them and asks), at /login too, and the cookie cleared
        for path in ("/failed", "/login"):
            status, headers, text = answer(web, path, {**OPERATOR, "HTTP_COOKIE": cookie})
            assert status == "401 Unauthorized" and "expired" in text
            assert dict(headers)["WWW-Authenticate"].startswith("Basic")
            assert "Max-Age=0" in set_cookies(headers)[SESSION_COOKIE]
        assert call(web, "/login", headers=OPERATOR)[0] == "303 See Other"  # (typed again)
        fresh = browser_session(web)
        assert browser_post(web, "/job/d2/discard", {}, fresh)[0] == "303 See Other"
    assert store.state("d2") == "discarded"


def test_a_log_out_mark_the_dashboard_did_not_sign_is_ignored_and_cleared(
        store: Store, web: Dashboard) -> None:
    """Another origin on this host (another port; cookies ignore ports) plants the mark on a
    sub-path: the operator's pages still open, and the mark is cleared at that path."""
    store.dead("d1")
    for planted in ("1", "out.forged-signature", "x" * 40):
        headers = {**OPERATOR, "HTTP_COOKIE": f"{LOGGED_OUT_COOKIE}={planted}"}
        for _ in range(3):
            status, got, _ = answer(web, "/job/d1", headers)
            assert status == "200 OK", status
            clears = [v for k, v in got if k == "Set-Cookie"
                      and v.startswith(LOGGED_OUT_COOKIE + "=;")]
            assert {v.split("Path=", 1)[1].split(";")[0] for v in clears} == {
                "/", "/job", "/job/d1"}, clears
            assert all("Max-Age=0" in v for v in clears)
    # a signed mark (the dashboard's own log-out) is challenged, and cleared at that path too
    cookie, token = browser_session(web)
    _, got, _ = answer(web, "/logout", {**OPERATOR, "HTTP_COOKIE": cookie}, "POST",
                       {"token": token})
    out = set_cookies(got)[LOGGED_OUT_COOKIE].split(";", 1)[0]
    assert out != f"{LOGGED_OUT_COOKIE}=1"
    status, got, _ = answer(web, "/job/d1", {**OPERATOR, "HTTP_COOKIE": out})
    assert status == "401 Unauthorized"
    assert "Path=/job;" in " ".join(v for k, v in got if k == "Set-Cookie")
