"""The reply bound of a Redis connection (``socket_timeout``), kept by the kernel.

redis-py applies ``socket_timeout`` by putting its socket in Python's timeout mode, where
every ``recv`` and ``send`` first waits in ``poll()``: one more system call per read and per
write, about a tenth of the store's throughput on a round trip per job (docs/benchmarks.md,
"Issue #27's bounded connections against the redesign"). The same bound set on the socket
itself (``SO_RCVTIMEO`` / ``SO_SNDTIMEO``) costs nothing per call: the socket stays blocking,
and a read or write that waits longer fails with ``EAGAIN``, raised here as
:class:`ReplyTimeout` (a redis-py ``TimeoutError``, as Python's own timeout is; redis-py
drops the connection).

Under gevent or eventlet the socket is the green library's, which waits in its hub and never
sees the kernel's timeout: there redis-py keeps the bound itself (:func:`connection_bound`).
"""

from __future__ import annotations

import errno
import functools
import socket
import ssl
import struct
from typing import Any

import redis

from celery_plus.runtime.helper_threads import green_patched
from celery_plus.stores.redis.refusals import RefusingParser


class ReplyTimeout(redis.exceptions.TimeoutError):
    """No reply (or no room to write) within the connection's ``socket_timeout``."""


def connection_bound(seconds: float | None) -> dict[str, Any]:
    """The connection keyword arguments that bound each reply by ``seconds`` (None: no
    bound): a parser that sets the bound on every new socket, or, in a green-patched
    process, redis-py's own ``socket_timeout``."""
    if seconds is None:
        return {"socket_timeout": None, "parser_class": RefusingParser}
    if green_patched():
        return {"socket_timeout": seconds, "parser_class": RefusingParser}
    return {"socket_timeout": None, "parser_class": bounded_parser(float(seconds))}


@functools.cache
def bounded_parser(seconds: float) -> type[RefusingParser]:
    """A :class:`RefusingParser` that bounds its connection's reads and writes by
    ``seconds`` in the kernel."""
    whole = int(seconds)
    timeval = struct.pack("ll", whole, int((seconds - whole) * 1_000_000))

    class BoundedParser(RefusingParser):
        reply_timeout = seconds

        def on_connect(self, connection: Any) -> None:
            sock = connection._sock
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, timeval)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, timeval)
            super().on_connect(connection)

        def read_response(self, *args: Any, **kwargs: Any) -> Any:
            try:
                return super().read_response(*args, **kwargs)
            except redis.exceptions.ConnectionError as exc:
                if _timed_out(exc.__context__):
                    raise ReplyTimeout(
                        f"no reply from Redis within {seconds:g} s (socket_timeout: a "
                        "stalled or half-open link, or a slow command)") from exc
                raise

    return BoundedParser


def _timed_out(error: BaseException | None) -> bool:
    """Whether ``error`` is a blocking read that the kernel's timeout ended."""
    if isinstance(error, ssl.SSLWantReadError):
        return True
    return isinstance(error, OSError) and error.errno in (errno.EAGAIN, errno.EWOULDBLOCK)


__all__ = ["ReplyTimeout", "bounded_parser", "connection_bound"]
