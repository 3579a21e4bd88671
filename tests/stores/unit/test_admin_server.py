"""The dashboard's server (``celery_plus/admin/server.py``, waitress) against slow clients.

Slowloris: one client opens many connections and keeps each alive by sending a header line
now and then. Waitress's idle timeout never fires (each connection is active) and its
connection limit fills up, so every page and ``/metrics`` stopped answering for as long as
the client went on. The server now closes a request that has not arrived whole within its
deadline, and the connections of one address beyond its share. The attacker connects from
127.0.0.3 and the operator from 127.0.0.2 (both loopback), so the server sees two clients.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest

from celery_plus import Celery
from celery_plus.admin import connect
from celery_plus.admin.server import CONNECTION_LIMIT, PER_CLIENT_LIMIT, create, stop
from tests.fast.unit.test_admin_cli import Store
from tests.support import wait_until

ATTACKER, OPERATOR = "127.0.0.3", "127.0.0.2"


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Any]:
    server = create(f"plus+sqlite:///{tmp_path / 'store.db'}", "127.0.0.1", 0,
                    request_timeout=2)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    yield server
    stop(server)
    thread.join(10)


def is_open(sock: socket.socket) -> bool:
    """Whether the server still holds ``sock`` open (it has sent nothing on it)."""
    sock.setblocking(False)
    try:
        return sock.recv(1) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False


def metrics(port: int) -> float:
    """Seconds ``GET /metrics`` took from the operator's address (it must answer 200)."""
    started = time.monotonic()
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10,
                                      source_address=(OPERATOR, 0))
    try:
        conn.request("GET", "/metrics")
        response = conn.getresponse()
        assert response.status == 200 and b"celery_plus_jobs{" in response.read()
    finally:
        conn.close()
    return time.monotonic() - started


def test_a_slow_client_cannot_hold_the_dashboard(served: Any) -> None:
    port = int(served.effective_port)
    flood = []
    for _ in range(CONNECTION_LIMIT + 20):  # more than the server takes at once
        sock = socket.create_connection(("127.0.0.1", port), 10, source_address=(ATTACKER, 0))
        sock.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # never finished
        flood.append(sock)
    dripping = threading.Event()
    dripping.set()

    def drip() -> None:  # a header line on each connection every 0.5 s, for 15 s at most
        deadline = time.monotonic() + 15
        while dripping.is_set() and time.monotonic() < deadline:
            for sock in flood:
                with contextlib.suppress(OSError):  # (closed by the server)
                    sock.send(b"X-Slow: 1\r\n")
            time.sleep(0.5)

    dripper = threading.Thread(target=drip, daemon=True)
    dripper.start()
    try:
        assert metrics(port) < 5  # while the flood goes on
        # the address's connections beyond its share were closed at once ...
        wait_until(lambda: sum(is_open(s) for s in flood) <= PER_CLIENT_LIMIT, timeout=10,
                   message="connections beyond the address's share closed")
        # ... and the rest once their request's deadline (2 s here) passed, dripping or not
        wait_until(lambda: not any(is_open(s) for s in flood), timeout=10,
                   message="the slow requests closed at their deadline")
        assert metrics(port) < 5
    finally:
        dripping.clear()
        dripper.join(20)
        for sock in flood:
            sock.close()


def test_a_request_sent_in_pieces_within_the_deadline_is_answered(served: Any) -> None:
    port = int(served.effective_port)
    with socket.create_connection(("127.0.0.1", port), 10) as sock:
        for piece in (b"GET /metrics HTTP/1.1\r\n", b"Host: 127.0.0.1\r\n",
                      b"Connection: close\r\n", b"\r\n"):
            sock.sendall(piece)
            time.sleep(0.3)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200") and b"celery_plus_jobs{" in answer


# -- behind a reverse proxy (docs/admin.md, "Behind a reverse proxy") -------------------------
PROXY, CLIENT = "127.0.0.4", "127.0.0.5"
PROXY_TOKEN = "cbqjM15aYS1XosLM2-LASIS44nDtUMTL"


def ask(port: int, source: str, method: str, path: str, headers: dict[str, str],
        body: str = "") -> tuple[int, dict[str, str], str]:
    """One request from ``source`` (status, headers, body)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10,
                                      source_address=(source, 0))
    try:
        conn.request(method, path, body=body.encode() or None, headers={
            "Authorization": "Basic " + base64.b64encode(
                f"op:{PROXY_TOKEN}".encode()).decode(),
            **({"Content-Type": "application/x-www-form-urlencoded"} if body else {}),
            **headers})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read().decode()
    finally:
        conn.close()


def test_behind_a_trusted_proxy_the_public_name_and_scheme_count(tmp_path: Path) -> None:
    """``--trusted-proxy``: from that address, waitress takes scheme and host from the
    ``X-Forwarded-*`` headers (the session cookie is ``Secure``, the allowed-hosts and origin
    checks see the public name, and an operator's form posts through it); from any other
    address those headers are ignored. The proxy's address also holds any number of
    connections (it carries every client's)."""
    app = Celery("proxied", broker=f"plus+sqlite:///{tmp_path / 'store.db'}",
                 set_as_current=False)
    app.conf.plus_admin_token = PROXY_TOKEN
    with connect(app) as admin:
        Store(app, admin.store.backend).dead("d1")  # type: ignore[attr-defined]
    server = create(app, "127.0.0.1", 0, allowed_hosts=["ops.example.com"],
                    trusted_proxy=PROXY, per_client=3)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    port = int(server.effective_port)
    upstream = f"127.0.0.1:{port}"  # the Host a proxy that does not pass it on sends
    forwarded = {"Host": upstream, "X-Forwarded-Proto": "https",
                 "X-Forwarded-Host": "ops.example.com", "X-Forwarded-For": "203.0.113.9"}
    try:
        status, headers, page = ask(port, PROXY, "GET", "/job/d1", forwarded)
        assert status == 200, page
        assert headers["Set-Cookie"].endswith("; Secure"), headers["Set-Cookie"]
        cookie = headers["Set-Cookie"].split(";", 1)[0]
        token = re.findall(r'name="token" value="([^"]+)"', page)[0]
        # the public name is the one checked
        status, _, text = ask(port, PROXY, "GET", "/job/d1",
                              {**forwarded, "X-Forwarded-Host": "evil.example"})
        assert status == 400 and "'evil.example' is not one" in text
        # from another address the same headers are ignored: the Host is the one checked,
        # and the scheme is plain http (no Secure cookie)
        status, headers, _ = ask(port, CLIENT, "GET", "/job/d1", forwarded)
        assert status == 200 and "Secure" not in headers["Set-Cookie"]
        status, _, text = ask(port, CLIENT, "GET", "/job/d1",
                              {"Host": "evil.example", "X-Forwarded-Host": "ops.example.com"})
        assert status == 400 and "'evil.example' is not one" in text
        # the browser's form, posted through the proxy from the public origin
        status, headers, text = ask(
            port, PROXY, "POST", "/job/d1/discard", {
                **forwarded, "Cookie": cookie, "Origin": "https://ops.example.com",
                "Sec-Fetch-Site": "same-origin"}, urlencode({"token": token}))
        assert status == 303 and headers["Location"].startswith("/job/d1?msg=discard"), text
        # the proxy holds more connections than one client may
        proxied = [socket.create_connection(("127.0.0.1", port), 10,
                                            source_address=(PROXY, 0)) for _ in range(6)]
        direct = [socket.create_connection(("127.0.0.1", port), 10,
                                           source_address=(CLIENT, 0)) for _ in range(6)]
        try:
            wait_until(lambda: sum(is_open(s) for s in direct) <= 3, timeout=10,
                       message="a client's connections beyond its share closed")
            assert all(is_open(s) for s in proxied)
        finally:
            for sock in proxied + direct:
                sock.close()
    finally:
        stop(server)
        thread.join(10)
        app.close()


def test_the_address_served_on_is_an_allowed_host(tmp_path: Path) -> None:
    """``celery-plus admin --host 127.0.0.6`` answers to that address besides the loopback
    names (docs/admin.md, "Allowed hosts"); a wildcard address names no host."""
    for host, answered, refused in (("127.0.0.6", ["127.0.0.6", "localhost"], ["127.0.0.7"]),
                                    ("0.0.0.0", ["127.0.0.1"], ["0.0.0.0", "127.0.0.6"])):
        server = create(f"plus+sqlite:///{tmp_path / 'store.db'}", host, 0)
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        port = int(server.effective_port)
        try:
            for name, status in [*((n, 200) for n in answered), *((n, 400) for n in refused)]:
                conn = http.client.HTTPConnection(host, port, timeout=10)
                try:
                    conn.request("GET", "/metrics", headers={"Host": f"{name}:{port}"})
                    assert conn.getresponse().status == status, (host, name)
                finally:
                    conn.close()
        finally:
            stop(server)
            thread.join(10)


def test_an_idle_connection_is_closed_after_the_channel_timeout(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A connection that sends nothing is closed after ``CHANNEL_TIMEOUT`` (30 s; 2 s here),
    once the kernel has handed it over (on Linux after about ``DEFER_ACCEPT`` seconds: the
    server is given silent connections late, :mod:`celery_plus.admin.server`)."""
    from celery_plus.admin import server as module

    monkeypatch.setattr(module, "CHANNEL_TIMEOUT", 2)
    server = create(f"plus+sqlite:///{tmp_path / 'store.db'}", "127.0.0.1", 0)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    held = 0.0
    if hasattr(socket, "TCP_DEFER_ACCEPT"):
        assert server.socket.getsockopt(socket.IPPROTO_TCP, socket.TCP_DEFER_ACCEPT) > 0
        held = 2.0 * module.DEFER_ACCEPT  # (Linux rounds it up to SYN-ACK retransmissions)
    try:
        with socket.create_connection(("127.0.0.1", int(server.effective_port)), 10) as sock:
            started = time.monotonic()
            wait_until(lambda: not is_open(sock), timeout=15 + held,
                       message="the idle connection closed")
            assert 1.5 < time.monotonic() - started < 10 + held
    finally:
        stop(server)
        thread.join(10)


def test_a_wildcard_trusted_proxy_exempts_every_address_from_the_cap(tmp_path: Path) -> None:
    """``--trusted-proxy '*'`` (waitress: any address may be the proxy): the proxy's
    connections, whatever its address, are not closed as one client's beyond its share."""
    server = create(f"plus+sqlite:///{tmp_path / 'store.db'}", "127.0.0.1", 0,
                    trusted_proxy="*", per_client=3)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    port = int(server.effective_port)
    socks = [socket.create_connection(("127.0.0.1", port), 10, source_address=(PROXY, 0))
             for _ in range(6)]
    try:
        # (each answered: the server took every connection, and kept it)
        for sock in socks:
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert sock.recv(12) == b"HTTP/1.1 200"
        assert all(is_open(s) for s in socks)
    finally:
        for sock in socks:
            sock.close()
        stop(server)
        thread.join(10)


def test_stop_makes_run_return_every_time(tmp_path: Path) -> None:
    """``stop(server)`` from another thread (docs/admin.md: running waitress yourself): ``run``
    returns, every time, at once. Closing the sockets from the stopping thread raced the
    serving thread's ``select`` (EBADF: ``run`` raised, about one stop in ten)."""
    for _ in range(100):
        server = create(f"plus+sqlite:///{tmp_path / 'store.db'}", "127.0.0.1", 0)
        raised: list[BaseException] = []

        def serve(server: Any = server, raised: list[BaseException] = raised) -> None:
            try:
                server.run()
            except BaseException as exc:  # (whatever it is, the test says so)
                raised.append(exc)

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        clients = [socket.create_connection(("127.0.0.1", int(server.effective_port)), 10)
                   for _ in range(20)]
        try:
            stop(server)
            thread.join(10)
            assert not thread.is_alive() and not raised, raised
        finally:
            for sock in clients:
                sock.close()
