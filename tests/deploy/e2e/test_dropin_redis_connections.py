"""Defect 11 of issue 12: the broker's Redis connection options reach the store's clients.

Real workers against ``redis-server`` processes the tests start: TLS with a CA made in the
test (``broker_use_ssl`` and the ``rediss://…?ssl_ca_certs=`` URL form; the wrong CA is
refused), and Sentinel (``plus+sentinel://`` with ``master_name``), whose master holds the
jobs. ``tests/fast/unit/test_redis_connect.py`` checks every transport option reaches redis-py.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from tests.redis_servers import Certificates, RedisServer

from . import dropin_proj
from .conftest import Worker, wait_until

APP = "tests.deploy.e2e.dropin_proj"


@pytest.fixture
def certificates(tmp_path: Path) -> Certificates:
    return Certificates.make(tmp_path / "tls")


@pytest.fixture
def tls_server(tmp_path: Path, certificates: Certificates) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "tls-redis", tls=certificates).start()
    yield server
    server.stop()


def _serve_one(start_worker: Callable[..., Worker], prefix: str, env: dict[str, str],
               monkeypatch: pytest.MonkeyPatch) -> Any:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    start_worker(app=APP, env=env)
    app = dropin_proj.make_app(prefix)
    try:
        return app.tasks["proj.add"].delay(20, 22).get(timeout=30)
    finally:
        app.close()


@pytest.fixture
def broker_url() -> str:
    return "chosen per test"  # no store parametrisation: each test runs its own server


def test_a_store_reached_through_its_unix_socket(start_worker: Callable[..., Worker],
                                                 prefix: str, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """kombu's ``redis+socket:///path?virtual_host=N`` form, with ``plus+`` in front: the jobs
    go through the socket into database N (the TCP-only keepalive defaults left out)."""
    server = RedisServer(tmp_path / "unix-redis", unix_socket=True).start()
    try:
        url = f"plus+redis+socket://{server.socket_path}?virtual_host=2"
        assert _serve_one(start_worker, prefix, {"PLUS_TEST_BROKER": url}, monkeypatch) == 42
        client = server.client()
        assert client.execute_command("SELECT", 2) and client.dbsize() > 0
        assert server.client().dbsize() == 0, "database 0 was written: virtual_host ignored"
    finally:
        server.stop()


def test_tls_with_broker_use_ssl(start_worker: Callable[..., Worker], prefix: str,
                                 tls_server: RedisServer, certificates: Certificates,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    env = {"PLUS_TEST_BROKER": f"plus+rediss://127.0.0.1:{tls_server.port}/0",
           "PLUS_TEST_SSL_CA": str(certificates.ca)}
    assert _serve_one(start_worker, prefix, env, monkeypatch) == 42
    assert tls_server.client().dbsize() > 0, "the jobs are not on the TLS server"


def test_tls_with_the_certificate_in_the_url(start_worker: Callable[..., Worker], prefix: str,
                                             tls_server: RedisServer,
                                             certificates: Certificates,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    url = (f"plus+rediss://127.0.0.1:{tls_server.port}/0?ssl_cert_reqs=required"
           f"&ssl_ca_certs={quote(str(certificates.ca))}")
    assert _serve_one(start_worker, prefix, {"PLUS_TEST_BROKER": url}, monkeypatch) == 42


def test_tls_with_the_wrong_ca_is_refused(start_worker: Callable[..., Worker], tmp_path: Path,
                                          tls_server: RedisServer,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    other = Certificates.make(tmp_path / "other-ca")
    env = {"PLUS_TEST_BROKER": f"plus+rediss://127.0.0.1:{tls_server.port}/0",
           "PLUS_TEST_SSL_CA": str(other.ca)}
    worker = start_worker(app=APP, env=env, ready=False)
    wait_until(lambda: "Cannot connect to plus+rediss://" in worker.log(), timeout=60,
               message="the worker refuses the server's certificate")
    assert "certificate verify failed" in worker.log()


def test_sentinel(start_worker: Callable[..., Worker], prefix: str, tmp_path: Path,
                  monkeypatch: pytest.MonkeyPatch) -> None:
    master = RedisServer(tmp_path / "master").start()
    sentinel = RedisServer(tmp_path / "sentinel", sentinel_of=master).start()
    try:
        url = (f"plus+sentinel://127.0.0.1:{sentinel.port};"
               f"sentinel://127.0.0.1:{sentinel.port}/0")
        env = {"PLUS_TEST_BROKER": url,
               "PLUS_TEST_TRANSPORT_OPTIONS": json.dumps({"master_name": "mymaster"})}
        assert _serve_one(start_worker, prefix, env, monkeypatch) == 42
        assert master.client().keys(f"{prefix}:*"), \
            "the jobs are not on the Sentinel's master"
    finally:
        sentinel.stop()
        master.stop()
