"""The fault proxy itself: pass, stall (silence, sockets open), reset (RST), refuse, resume,
strand."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

import pytest

from .proxy import FaultProxy


@pytest.fixture
def echo() -> Iterator[int]:
    """A local echo server's port."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve(conn: socket.socket) -> None:
        with conn, contextlib.suppress(OSError):  # the proxy resets some links
            while data := conn.recv(4096):
                conn.sendall(data)

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    yield server.getsockname()[1]
    server.close()


@pytest.fixture
def proxy(echo: int) -> Iterator[FaultProxy]:
    with FaultProxy("127.0.0.1", echo) as p:
        yield p


def _client(proxy: FaultProxy) -> socket.socket:
    return socket.create_connection(("127.0.0.1", proxy.port), timeout=2)


def _reset_or_closed(proxy: FaultProxy) -> bool:
    try:
        with _client(proxy) as sock:
            sock.settimeout(2)
            sock.sendall(b"x")
            return not sock.recv(10)
    except ConnectionError:
        return True


def _echoes(sock: socket.socket, data: bytes = b"ping", timeout: float = 2.0) -> bool:
    sock.settimeout(timeout)
    sock.sendall(data)
    try:
        return sock.recv(4096) == data
    except TimeoutError:
        return False


def test_pass_forwards_both_ways(proxy: FaultProxy) -> None:
    with _client(proxy) as sock:
        assert _echoes(sock)
        assert proxy.connections() == 1


def test_stall_is_silence_then_resume_delivers_what_waited(proxy: FaultProxy) -> None:
    with _client(proxy) as sock:
        assert _echoes(sock)
        proxy.stall()
        assert not _echoes(sock, b"held", timeout=0.3)  # no reply, no error
        with _client(proxy) as late:  # a new connection is accepted, and stalls too
            assert not _echoes(late, timeout=0.3)
        proxy.resume()
        sock.settimeout(2)
        assert sock.recv(4096) == b"held"
        assert _echoes(sock)


def test_resume_with_strand_leaves_old_links_half_open(proxy: FaultProxy) -> None:
    with _client(proxy) as old:
        assert _echoes(old)
        proxy.stall()
        proxy.resume(strand=True)
        assert not _echoes(old, timeout=0.3)
        with _client(proxy) as new:
            assert _echoes(new)


def test_reset_sends_rst_to_current_and_new_connections(proxy: FaultProxy) -> None:
    with _client(proxy) as sock:
        assert _echoes(sock)
        proxy.reset()
        sock.settimeout(2)
        with pytest.raises(ConnectionResetError):
            sock.sendall(b"x")
            sock.recv(10)
    assert _reset_or_closed(proxy)  # a new connection is reset (during connect, or after)
    proxy.resume()
    with _client(proxy) as sock:
        assert _echoes(sock)


def test_reset_with_refuse_refuses_new_connections_until_resumed(proxy: FaultProxy) -> None:
    with _client(proxy) as sock:
        assert _echoes(sock)
        proxy.reset(refuse=True)
        sock.settimeout(2)
        with pytest.raises(ConnectionResetError):
            sock.sendall(b"x")
            sock.recv(10)
    for _ in range(2):  # refused, not accepted then reset: for as long as the fault lasts
        with pytest.raises(ConnectionRefusedError):
            _client(proxy)
    assert proxy.connections() == 0
    proxy.resume()
    with _client(proxy) as sock:  # the same port listens again
        assert _echoes(sock)
