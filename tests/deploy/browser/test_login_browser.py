"""Log-out and session expiry in a real browser (issue #28): Chromium, holding the operator's
Basic credentials (as after a person typed them into its prompt), presses *log out*, or lets
its session expire; opening a page afterwards does not show the operator's pages until the
credentials are given again (the dashboard challenges the cached ones, so Chromium drops
them); ``/login`` with them starts a new session, whose forms work again. (The old cookie
put back with the credentials: ``tests/fast/unit/test_admin_login.py``.)"""

from __future__ import annotations

from typing import Any

from celery_plus.admin.sessions import EXPIRED, Sessions
from celery_plus.admin.throttle import MAX_TOTAL
from celery_plus.admin.web import Dashboard
from tests.deploy.browser.conftest import ADMIN_TOKEN, Browser, Site
from tests.support import wait_until

Answers = list[tuple[str, bool, str, list[tuple[str, str]], str]]


def record(web: Dashboard) -> Answers:
    """What the dashboard answers from now on: (path, whether the request carried
    credentials, status, headers, text)."""
    seen: Answers = []
    answer = web._answer

    def recorded(environ: Any, limit: Any) -> tuple[str, list[tuple[str, str]], str]:
        status, headers, body = answer(environ, limit)
        seen.append((str(environ.get("PATH_INFO")), bool(environ.get("HTTP_AUTHORIZATION")),
                     status, headers, body))
        return status, headers, body

    web._answer = recorded  # type: ignore[method-assign]
    return seen


def assert_asked_again(browser: Browser, site: Site, why: str) -> None:
    """Opening a page with no credentials typed: Chromium re-sends the cached ones, the
    dashboard challenges them (``why``), Chromium drops them and asks (headless: a blank page
    while its prompt waits); the next page is asked for again, sent without credentials."""
    seen = record(site.web)
    for path in ("/failed", "/"):
        browser.open(site.url + path)
        assert not browser.driver.find_elements("css selector", "#logout")
        assert browser.driver.get_cookie("plus_admin_session") is None
    first, then = [a for a in seen if a[0] != "/favicon.ico"][:2]
    assert first[:3] == ("/failed", True, "401 Unauthorized"), first
    assert dict(first[3])["WWW-Authenticate"].startswith("Basic"), first
    assert then[:3] == ("/", False, "401 Unauthorized"), then  # (credentials dropped)
    assert browser.driver.get_cookie("plus_admin_out") is None
    assert why in first[4], first


def test_log_out_ends_the_browser_session_until_login(dashboard: Site,
                                                      browser: Browser) -> None:
    browser.open(dashboard.operator_url + "/failed")
    cookie = browser.driver.get_cookie("plus_admin_session")
    assert cookie is not None and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    browser.click("#logout")
    assert "logged out" in browser.text()
    assert browser.driver.get_cookie("plus_admin_session") is None  # (forgotten)
    assert_asked_again(browser, dashboard, "was logged out")
    # credentials given again (/login): a new session, with its log-out button (form token)
    browser.open(dashboard.operator_url + "/login")
    assert browser.find("#logout").is_displayed()
    fresh = browser.driver.get_cookie("plus_admin_session")
    assert fresh is not None and fresh["value"] != cookie["value"]


def test_an_expired_session_asks_for_the_credentials_again(dashboard: Site,
                                                           browser: Browser) -> None:
    sessions = Sessions(ADMIN_TOKEN, max_age=2)
    dashboard.web.sessions = sessions
    browser.open(dashboard.operator_url + "/failed")
    cookie = browser.driver.get_cookie("plus_admin_session")
    assert cookie is not None and browser.find("#logout").is_displayed()
    wait_until(lambda: sessions.open(cookie["value"])[0] == EXPIRED, timeout=10)
    assert_asked_again(browser, dashboard, "has expired")
    browser.open(dashboard.operator_url + "/login")
    assert browser.find("#logout").is_displayed()


def test_a_mistyped_token_is_asked_for_again_while_failures_are_refused(
        dashboard: Site, browser: Browser) -> None:
    """Anyone's guessing flood has all addresses over the limit; the operator mistypes the
    token: the refusal challenges it, so Chromium drops it and the next page is sent without
    credentials (its prompt), not with the wrong ones again (a 429 kept them)."""
    for n in range(MAX_TOTAL):
        dashboard.web.throttle.failed(f"10.0.{n // 200}.{n % 200 + 1}", "/")
    seen = record(dashboard.web)
    typo = ADMIN_TOKEN[:-1] + ("x" if ADMIN_TOKEN[-1] != "x" else "y")
    browser.open(dashboard.operator_url.replace(ADMIN_TOKEN, typo) + "/failed")
    browser.open(dashboard.url + "/failed")
    pages = [a for a in seen if a[0] != "/favicon.ico"]
    refused = [a for a in pages if a[1]]
    assert refused and all(a[2] == "401 Unauthorized" and "too many failed" in a[4]
                           and dict(a[3])["WWW-Authenticate"].startswith("Basic")
                           for a in refused), pages
    assert pages[-1][:3] == ("/failed", False, "401 Unauthorized"), pages
