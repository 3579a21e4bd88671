"""Login that holds (issue #28): failed logins throttled and logged, weak secrets refused at
start-up, log-out, sessions and form tokens that expire — the dashboard as a WSGI
application on the embedded store."""

from __future__ import annotations

import logging

import pytest
from celery.exceptions import ImproperlyConfigured
from freezegun import freeze_time

from celery_plus import settings
from celery_plus.admin.sessions import FORM_MAX_AGE, SESSION_MAX_AGE
from celery_plus.admin.throttle import MAX_FAILURES
from celery_plus.admin.web import Dashboard
from tests.fast.unit import test_admin_web_security as security
from tests.fast.unit.test_admin_cli import Store
from tests.stores.unit.test_admin_web import basic, browser_post, browser_session, call

GUESSER, OTHER = "127.0.0.9", "127.0.0.8"
OPERATOR = security.OPERATOR
#: The security tests' fixtures: an app with both secrets on SQLite, and its dashboard.
store, web = security.store, security.web


def test_failed_logins_are_logged_and_the_guessing_address_refused(
        web: Dashboard, caplog: pytest.LogCaptureFixture) -> None:
    session = browser_session(web)  # the operator's browser, logged in before
    wrong = {**basic("op", "not-the-secret-at-all"), "REMOTE_ADDR": GUESSER}
    with caplog.at_level(logging.WARNING, "celery_plus.admin.web"):
        for _ in range(MAX_FAILURES):
            assert call(web, "/api/status", headers=wrong)[0] == "401 Unauthorized"
    failed = [r.getMessage() for r in caplog.records if "failed login" in r.getMessage()]
    assert len(failed) == MAX_FAILURES and GUESSER in failed[-1], failed
    assert "not-the-secret" not in caplog.text  # (the guess itself is never logged)
    # the address is refused, even with the right secret, before any check ...
    status, headers, text = call(web, "/api/status", headers=wrong)
    assert status == "429 Too Many Requests" and int(headers["Retry-After"]) > 0, text
    assert call(web, "/api/status", headers={**OPERATOR, "REMOTE_ADDR": GUESSER})[0] == \
        "429 Too Many Requests"
    # ... but a browser that logged in before keeps working from it, and other addresses
    cookie, _ = session
    status, _, _ = call(web, "/failed", headers={**OPERATOR, "REMOTE_ADDR": GUESSER,
                                                 "HTTP_COOKIE": cookie})
    assert status == "200 OK"
    assert call(web, "/api/status", headers={**OPERATOR, "REMOTE_ADDR": OTHER})[0] == "200 OK"


def test_a_weak_secret_fails_at_start_up_naming_the_setting() -> None:
    for name in ("plus_admin_token", "plus_admin_read_token"):
        for weak in ("aaaaaaaaaaaaaaaaaaaa", "abababababababababab", "1234512345123451"):
            with pytest.raises(ImproperlyConfigured, match=name) as caught:
                settings.resolve({name: weak})
            assert weak not in str(caught.value) and "8 of them different" in str(caught.value)
    assert settings.resolve({"plus_admin_token": "Xk2-pq9_Lm4.zR7w"}).admin_token


def test_log_out_ends_the_session_until_the_next_login(store: Store, web: Dashboard) -> None:
    store.dead("d1")
    cookie, token = browser_session(web)
    status, headers, _ = browser_post(web, "/logout", {}, (cookie, token))
    assert status == "200 OK" and "Max-Age=0" in headers["Set-Cookie"]
    # the old cookie no longer opens pages nor posts forms (a browser that kept it)
    status, headers, text = call(web, "/failed", headers={**OPERATOR, "HTTP_COOKIE": cookie})
    assert status == "401 Unauthorized" and "logged out" in text
    assert "Max-Age=0" in headers["Set-Cookie"]
    assert browser_post(web, "/job/d1/discard", {}, (cookie, token))[0] == "401 Unauthorized"
    assert store.state("d1") == "failed"
    # /login starts a new session, whose forms work
    status, headers, _ = call(web, "/login", headers={**OPERATOR, "HTTP_COOKIE": cookie})
    assert status == "303 See Other"
    fresh = headers["Set-Cookie"].split(";", 1)[0]
    assert fresh != cookie
    status, _, page = call(web, "/job/d1", headers={**OPERATOR, "HTTP_COOKIE": fresh})
    assert status == "200 OK" and 'id="logout"' in page
    # a log-out is a form of the dashboard's own: without its token it is refused
    assert call(web, "/logout", "POST", {}, headers={**OPERATOR, "HTTP_COOKIE": fresh})[0] == \
        "403 Forbidden"


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
        status, _, text = call(web, "/failed", headers={**OPERATOR, "HTTP_COOKIE": cookie})
        assert status == "401 Unauthorized" and "expired" in text
        status, _, _ = call(web, "/login", headers={**OPERATOR, "HTTP_COOKIE": cookie})
        assert status == "303 See Other"
        fresh = browser_session(web)
        assert browser_post(web, "/job/d2/discard", {}, fresh)[0] == "303 See Other"
    assert store.state("d2") == "discarded"
