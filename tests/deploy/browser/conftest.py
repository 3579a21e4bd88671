"""Browser-test harness: Debian's headless Chromium, driven by Selenium, against a real
dashboard server (waitress, as ``celery-plus admin`` serves it) on a real store with real
``celery-plus worker`` processes.

``browser`` is a fresh Chromium per test (``/usr/bin/chromium`` through Debian's
``/usr/bin/chromedriver``, the same version by construction; ``.ci/run`` installs both), so
a test clicks links, ticks checkboxes and presses buttons as a person does, and no
credentials carry over from one test to the next. Chromium resolves ``rebound.test`` to
127.0.0.1 (a DNS-rebinding attacker's name). ``dashboard`` serves
:mod:`celery_plus.admin.web` on a free port of 127.0.0.1 in a thread, for the end-to-end
harness's app (``tests/deploy/e2e/conftest.py``: a Redis key prefix of its own, Celery's Redis
result
backend) with ``plus_admin_token`` set; ``start_worker`` starts real workers on that store.
``Site.operator_url`` carries the operator's credentials: Chromium answers the dashboard's
HTTP Basic challenge with them, exactly as after a person typed them into the browser's
prompt.

The operator-feature tests (``test_operator_features.py``) share, per store, one deployment
(``deployment``: an app, two prefork workers, a dashboard) and one Chromium
(``module_browser``) across their tests, grouped on one xdist worker per store.
"""

from __future__ import annotations

import shutil
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from celery_plus import Celery
from celery_plus.admin.web import Dashboard
from celery_plus.model.store import Backend
from tests.deploy.e2e.conftest import (  # noqa: F401  (fixtures of the end-to-end harness)
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
ADMIN_TOKEN = "4BAbR1CoKvbeMaXCnSpL5RmI-_FHL7_H"
FLAGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--hide-scrollbars",
         "--window-size=1280,900", "--host-resolver-rules=MAP rebound.test 127.0.0.1"]


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


def launch(profile: Path, artifacts: Path) -> Browser:
    """A headless Chromium with an empty profile (skips the test if it is not installed)."""
    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if shutil.which(p) is None]
    if missing:
        pytest.skip(f"{', '.join(missing)} missing: apt-get install -y chromium "
                    "chromium-driver (.ci/run does)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in [*FLAGS, f"--user-data-dir={profile}"]:
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    artifacts.mkdir(exist_ok=True)
    return Browser(driver, artifacts)


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Browser]:
    chromium = launch(tmp_path / "chromium-profile", tmp_path / "artifacts")
    try:
        yield chromium
    finally:
        chromium.driver.quit()


@dataclass
class Site:
    """A served dashboard: its URL (and with the operator's credentials), the app, a backend
    on the same store."""

    url: str
    operator_url: str
    app: Celery
    backend: Backend
    web: Dashboard


class Served:
    """The dashboard of ``target`` served by waitress (as ``celery-plus admin`` does) in a
    thread, on a free port of 127.0.0.1."""

    def __init__(self, target: Any) -> None:
        from celery_plus.admin.server import create

        self.server = create(target, "127.0.0.1", 0)
        self.web: Dashboard = self.server.dashboard
        self.port = int(self.server.effective_port)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        from celery_plus.admin.server import stop

        stop(self.server)
        self.thread.join(10)


@pytest.fixture
def dashboard(client: Celery, view: Backend) -> Iterator[Site]:  # noqa: F811
    client.conf.plus_admin_token = ADMIN_TOKEN
    served = Served(client)
    port = served.port
    try:
        yield Site(f"http://127.0.0.1:{port}",
                   f"http://operator:{ADMIN_TOKEN}@127.0.0.1:{port}", client, view, served.web)
    finally:
        served.stop()
