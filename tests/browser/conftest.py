"""Browser-test harness: Debian's headless Chromium, driven by Selenium, against a real
dashboard server on a real store with real ``celery-plus worker`` processes.

``browser`` is a fresh Chromium per test (``/usr/bin/chromium`` through Debian's
``/usr/bin/chromedriver``, the same version by construction; ``.ci/run`` installs both), so
a test clicks links, ticks checkboxes and presses buttons as a person does, and no
credentials carry over from one test to the next. ``dashboard`` serves
:mod:`celery_plus.admin.web` with ``wsgiref`` on a free port of 127.0.0.1 in a thread, for the
end-to-end harness's app (``tests/e2e/conftest.py``: a Redis key prefix of its own, Celery's
Redis result backend) with ``plus_admin_token`` set; ``start_worker`` starts real workers on
that store. ``Site.operator_url`` carries the operator's credentials: Chromium answers the
dashboard's HTTP Basic challenge with them, exactly as after a person typed them into the
browser's prompt.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import pytest

from celery_plus import Celery
from celery_plus.admin.web import Dashboard, make_app
from celery_plus.transport.backend import Backend
from tests.e2e.conftest import (  # noqa: F401  (fixtures of the end-to-end harness)
    broker_kind,
    broker_url,
    client,
    prefix,
    start_worker,
    view,
)
from tests.support import wait_until

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"
ADMIN_TOKEN = "browser-test-admin-token-0123456789"
FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--hide-scrollbars", "--window-size=1280,900"]


class Browser:
    """One headless Chromium (a Selenium WebDriver session) and the test's artifacts dir."""

    def __init__(self, driver: Any, artifacts: Path) -> None:
        self.driver = driver
        self.artifacts = artifacts

    def open(self, url: str) -> None:
        self.driver.get(url)

    def find(self, css: str) -> Any:
        from selenium.webdriver.common.by import By

        return self.driver.find_element(By.CSS_SELECTOR, css)

    def find_all(self, css: str) -> list[Any]:
        from selenium.webdriver.common.by import By

        return list(self.driver.find_elements(By.CSS_SELECTOR, css))

    def click(self, css: str) -> None:
        """Click the element and wait for the page it leads to (a new document)."""
        old = self.find("html")
        self.find(css).click()
        wait_until(lambda: self._replaced(old), timeout=30, message=f"{css} loads a page")

    @staticmethod
    def _replaced(element: Any) -> bool:
        from selenium.common.exceptions import StaleElementReferenceException, WebDriverException

        try:
            element.tag_name  # noqa: B018  (raises once the old document is gone)
        except StaleElementReferenceException:
            return True
        except WebDriverException as exc:
            # Caught mid-navigation, chromedriver may say so in its own words.
            if "does not belong to the document" in str(exc):
                return True
            raise
        return False

    def text(self) -> str:
        return str(self.find("body").text)

    def job_links(self) -> list[str]:
        """Task ids the listing on screen links to, top to bottom."""
        return [a.text for a in self.find_all("table a[href*='/job/']")]

    def fact(self, name: str) -> str:
        """A row of the job page's facts table (``state``, ``task`` ...)."""
        from selenium.webdriver.common.by import By

        return str(self.driver.find_element(
            By.XPATH, f"//td[text()='{name}']/following-sibling::td").text)

    def screenshot(self, name: str) -> Path:
        path = self.artifacts / name
        assert self.driver.save_screenshot(str(path)), f"no screenshot {name}"
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{name} is not a PNG"
        return path


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Browser]:
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if shutil.which(p) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} missing: apt-get install -y chromium "
                    "chromium-driver (.ci/run does)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in [*FLAGS, f"--user-data-dir={tmp_path / 'chromium-profile'}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    try:
        yield Browser(driver, artifacts)
    finally:
        driver.quit()


@dataclass
class Site:
    """A served dashboard: its URL (and with the operator's credentials), the app, a backend
    on the same store."""

    url: str
    operator_url: str
    app: Celery
    backend: Backend
    web: Dashboard


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


class _Server(WSGIServer):
    # Chromium opens several connections at once; serve each in its own thread.
    def process_request(self, request: Any, client_address: Any) -> None:
        threading.Thread(target=self._serve_one, args=(request, client_address),
                         daemon=True).start()

    def _serve_one(self, request: Any, client_address: Any) -> None:
        try:
            self.finish_request(request, client_address)
        finally:
            self.shutdown_request(request)


@pytest.fixture
def dashboard(client: Celery, view: Backend) -> Iterator[Site]:  # noqa: F811
    client.conf.plus_admin_token = ADMIN_TOKEN
    web = make_app(client)
    server = make_server("127.0.0.1", 0, web, server_class=_Server, handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    port = server.server_port
    try:
        yield Site(f"http://127.0.0.1:{port}",
                   f"http://operator:{ADMIN_TOKEN}@127.0.0.1:{port}", client, view, web)
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
        web.close()
