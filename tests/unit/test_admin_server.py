"""The dashboard's server (``celery_plus/admin/server.py``, waitress) against slow clients.

Slowloris: one client opens many connections and keeps each alive by sending a header line
now and then. Waitress's idle timeout never fires (each connection is active) and its
connection limit fills up, so every page and ``/metrics`` stopped answering for as long as
the client went on. The server now closes a request that has not arrived whole within its
deadline, and the connections of one address beyond its share. The attacker connects from
127.0.0.3 and the operator from 127.0.0.2 (both loopback), so the server sees two clients.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from celery_plus.admin.server import CONNECTION_LIMIT, PER_CLIENT_LIMIT, create, stop
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
