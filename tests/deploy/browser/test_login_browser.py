"""Log-out in a real browser (issue #28): Chromium, holding the operator's Basic credentials,
presses *log out*; the session's cookie then opens nothing until ``/login`` starts a new
session, whose forms work again."""

from __future__ import annotations

from tests.deploy.browser.conftest import Browser, Site


def test_log_out_ends_the_browser_session_until_login(dashboard: Site,
                                                      browser: Browser) -> None:
    browser.open(dashboard.operator_url + "/failed")
    cookie = browser.driver.get_cookie("plus_admin_session")
    assert cookie is not None and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    browser.click("#logout")
    assert "logged out" in browser.text()
    assert browser.driver.get_cookie("plus_admin_session") is None  # (forgotten)
    # the old session's cookie, put back as a stolen or kept one would be, opens nothing
    browser.driver.add_cookie({"name": "plus_admin_session", "value": cookie["value"],
                               "path": "/"})
    browser.open(dashboard.url + "/failed")
    assert "was logged out" in browser.text() and "/login" in browser.text()
    # /login: a new session, with its log-out button (its form token) again
    browser.open(dashboard.operator_url + "/login")
    assert browser.find("#logout").is_displayed()
    fresh = browser.driver.get_cookie("plus_admin_session")
    assert fresh is not None and fresh["value"] != cookie["value"]
