"""Issue #27 / #26: the Redis reply bound is kept by the kernel (``SO_RCVTIMEO``), so a
stalled link fails within ``socket_timeout`` while every call stays a plain blocking one
(no ``poll()`` before each ``recv``: docs/benchmarks.md)."""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from celery_plus.stores.redis.reply_bound import ReplyTimeout, connection_bound


@pytest.fixture
def silent_server(tmp_path: Path) -> Iterator[str]:
    """The path of a server that accepts connections and never answers (a stalled link): a
    Unix socket, so the fast tier needs no network at all."""
    path = str(tmp_path / "silent.sock")
    server = socket.socket(socket.AF_UNIX)
    server.bind(path)
    server.listen()
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError, OSError):
                accepted.append(server.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield path
    finally:
        stop.set()
        thread.join()
        for conn in accepted:
            conn.close()
        server.close()


def client_of(path: str, seconds: float) -> redis.Redis:
    """A client of the store's kind (its parser and bound: ``connection_bound``, as
    ``RedisConnect.client`` makes them) on the Unix socket ``path``."""
    pool = redis.ConnectionPool(connection_class=redis.UnixDomainSocketConnection, path=path,
                                **connection_bound(seconds))
    return redis.Redis(connection_pool=pool)


def test_a_silent_server_fails_a_call_after_the_reply_bound(silent_server: str) -> None:
    client = client_of(silent_server, 0.3)
    started = time.monotonic()
    with pytest.raises(redis.exceptions.TimeoutError) as caught:
        client.execute_command("PING")
    elapsed = time.monotonic() - started
    # redis-py 8 re-raises a parser's TimeoutError with its own message; the kernel's
    # timeout is what ended the read.
    assert isinstance(caught.value, ReplyTimeout) or isinstance(
        caught.value.__context__, ReplyTimeout), repr(caught.value)
    # redis-py may try once more on a fresh connection (its default retry): each try ends
    # within the bound.
    assert 0.3 <= elapsed < 0.3 * 5, elapsed


def test_the_connection_stays_a_blocking_socket_with_the_kernel_timeout(
        silent_server: str) -> None:
    client = client_of(silent_server, 1.25)
    connection = client.connection_pool.make_connection()
    # The socket and the parser's set-up only: the server never answers a handshake.
    sock = connection._sock = connection._connect()
    connection._parser.on_connect(connection)
    try:
        assert sock.gettimeout() is None  # no poll() before each recv/send
        raw = sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, 16)
        seconds, micros = int.from_bytes(raw[:8], "little"), int.from_bytes(raw[8:], "little")
        assert seconds + micros / 1e6 == pytest.approx(1.25, abs=0.01)  # kernel ticks
    finally:
        connection.disconnect()


def test_no_bound_given_as_none_leaves_calls_unbounded() -> None:
    from celery_plus.stores.redis.refusals import RefusingParser

    assert connection_bound(None) == {"socket_timeout": None, "parser_class": RefusingParser}
