"""Browser-test harness: Debian's headless Chromium against a real dashboard server.

``chromium`` runs ``/usr/bin/chromium --headless`` (``--dump-dom`` for what the browser
made of a page, ``--screenshot`` for a PNG) with a throw-away profile and every background
service off; ``dashboard`` serves :mod:`celery_plus.admin.web` with ``wsgiref`` on a free
port of 127.0.0.1 in a thread, over a SQLite store in the test's tmp dir with
``plus_admin_token`` set. No extra Python dependency: actions are plain HTTP POSTs of the
form Chromium rendered (its action URL and hidden token), the results are read back through
Chromium's DOM.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import pytest

from celery_plus import Celery
from celery_plus.admin import connect
from celery_plus.admin.web import Dashboard, make_app
from celery_plus.transport.backend import Backend

CHROMIUM = "/usr/bin/chromium"
ADMIN_TOKEN = "browser-test-admin-token-0123456789"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--window-size=1280,800"]


@dataclass
class Element:
    tag: str
    attrs: dict[str, str]
    text: str = ""


@dataclass
class Dom:
    """A parsed ``--dump-dom``: every element (with its text) and the page's text."""

    html: str
    elements: list[Element] = field(default_factory=list)
    text: str = ""

    def all(self, tag: str, **attrs: str) -> list[Element]:
        return [e for e in self.elements if e.tag == tag
                and all(e.attrs.get(k) == v for k, v in attrs.items())]


class _Parser(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.elements: list[Element] = []
        self.open: list[Element] = []
        self.chunks: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = Element(tag, {k: v or "" for k, v in attrs})
        self.elements.append(element)
        if tag not in ("input", "meta", "br", "img", "link"):
            self.open.append(element)

    def handle_endtag(self, tag: str) -> None:
        while self.open:
            if self.open.pop().tag == tag:
                break

    def handle_data(self, data: str) -> None:
        self.chunks.append(data)
        for element in self.open:
            element.text += data


def parse(html: str) -> Dom:
    parser = _Parser()
    parser.feed(html)
    return Dom(html, parser.elements, "".join(parser.chunks))


class Chromium:
    """Headless Chromium, one process per page (a fresh profile in a tmp dir each time)."""

    def __init__(self, artifacts: Path) -> None:
        self.artifacts = artifacts

    def _run(self, *args: str) -> subprocess.CompletedProcess[str]:
        with tempfile.TemporaryDirectory(prefix="chromium-") as profile:
            return subprocess.run([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", *args],
                                  capture_output=True, text=True, timeout=90, check=True)

    def dom(self, url: str) -> Dom:
        """The DOM Chromium built from ``url`` (after parsing, and scripts if any ran)."""
        return parse(self._run("--dump-dom", url).stdout)

    def screenshot(self, url: str, name: str) -> Path:
        path = self.artifacts / name
        self._run(f"--screenshot={path}", url)
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"no PNG from {url}"
        return path


@pytest.fixture
def chromium(tmp_path: Path) -> Chromium:
    if shutil.which(CHROMIUM) is None:
        pytest.skip(f"{CHROMIUM} is missing: apt-get install -y chromium (see .ci/run)")
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    return Chromium(artifacts)


@dataclass
class Site:
    """A served dashboard: its base URL, the app and a backend on the same store."""

    url: str
    app: Celery
    backend: Backend
    web: Dashboard


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def dashboard(tmp_path: Path) -> Iterator[Site]:
    app = Celery("browser", broker=f"plus+sqlite:///{tmp_path / 'store.db'}",
                 set_as_current=False)
    app.conf.plus_admin_token = ADMIN_TOKEN
    admin = connect(app)
    web = make_app(app)
    server: WSGIServer = make_server("127.0.0.1", 0, web, handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                              daemon=True)
    thread.start()
    try:
        yield Site(f"http://127.0.0.1:{server.server_port}", app,
                   admin.store.backend, web)  # type: ignore[attr-defined]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)
        web.close()
        admin.close()
        app.close()
