"""A TCP proxy for fault tests: a link to a store that a test can stall, reset and resume.

``FaultProxy(host, port)`` listens on a free local port and forwards every connection to
``host:port``, one pair of threads per connection (stdlib only). Its mode changes at runtime:

* ``pass`` — bytes flow both ways;
* ``stall`` — no byte is forwarded either way, every socket stays open (a blackholed,
  half-open link: the peers see silence, not an error); new connections are accepted and
  stall too;
* ``reset`` — every connection is reset (``SO_LINGER`` 0, then close: an RST), and new ones
  are reset as soon as they are accepted; with ``refuse`` they are refused instead (the port
  stops listening: ``ECONNREFUSED``, what a store host that went away, or a firewall rule
  rejecting with ``tcp-reset``, answers a new connection).

:meth:`FaultProxy.resume` goes back to ``pass``; with ``strand=True`` the connections that
were stalled stay stalled for good (their server-side end is gone: half-open forever), only
new connections flow.
"""

from __future__ import annotations

import contextlib
import select
import socket
import struct
import threading
from typing import Literal

Mode = Literal["pass", "stall", "reset"]
#: Seconds a forwarding thread waits on its socket before it looks at the mode again.
_TICK = 0.05


class _Link:
    """One client connection and its upstream one."""

    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.client = client
        self.upstream = upstream
        self.stranded = False
        self.closed = False

    def reset(self) -> None:
        """Close both sockets with an RST."""
        self.closed = True
        for sock in (self.client, self.upstream):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()

    def close(self) -> None:
        self.closed = True
        self.client.close()
        self.upstream.close()


class FaultProxy:
    """Forward ``127.0.0.1:<port>`` to ``host:port`` (see the module docstring)."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self._mode: Mode = "pass"
        self._lock = threading.Lock()
        self._links: list[_Link] = []
        self._server: socket.socket | None = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._server.getsockname()[1]
        self._stopped = threading.Event()
        self._acceptor = threading.Thread(target=self._accept, daemon=True,
                                          name=f"fault-proxy-{self.port}")
        self._acceptor.start()

    @property
    def mode(self) -> Mode:
        return self._mode

    def url(self, scheme: str, rest: str = "") -> str:
        """``scheme://127.0.0.1:<port><rest>`` (``rest``: user, path and query around it
        are the caller's: ``url('postgresql', '/test')``)."""
        return f"{scheme}://127.0.0.1:{self.port}{rest}"

    def connections(self) -> int:
        """How many links are open now."""
        with self._lock:
            return sum(1 for link in self._links if not link.closed)

    def stall(self) -> None:
        self._set("stall")

    def reset(self, refuse: bool = False) -> None:
        """Reset every connection; new ones are reset (``refuse``: refused, the port closed)
        until the mode changes."""
        with self._lock:
            self._mode = "reset"
            links, self._links = self._links, []
            if refuse:
                self._stop_listening()
        for link in links:
            link.reset()

    def resume(self, strand: bool = False) -> None:
        """Back to ``pass`` (listening again on the same port if it was refusing);
        ``strand``: the links stalled so far never flow again."""
        with self._lock:
            if strand:
                for link in self._links:
                    link.stranded = True
            if self._server is None:
                self._server = socket.create_server(("127.0.0.1", self.port))
            self._mode = "pass"

    def close(self) -> None:
        self._stopped.set()
        with self._lock:
            self._stop_listening()
        with self._lock:
            links, self._links = self._links, []
        for link in links:
            link.close()

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the threads --------------------------------------------------------------------
    def _set(self, mode: Mode) -> None:
        with self._lock:
            self._mode = mode

    def _stop_listening(self) -> None:
        """Close the listening socket (under the lock). ``shutdown`` first: a bare ``close``
        neither wakes the thread blocked in ``accept`` nor stops the port listening."""
        if self._server is not None:
            with contextlib.suppress(OSError):
                self._server.shutdown(socket.SHUT_RDWR)
            self._server.close()
            self._server = None

    def _accept(self) -> None:
        while not self._stopped.is_set():
            server = self._server
            if server is None:  # refusing: wait for resume() to listen again
                self._stopped.wait(_TICK)
                continue
            try:
                client, _ = server.accept()
            except OSError:
                continue  # closed (refusing, or the proxy closed): the loop looks again
            if self._mode == "reset":
                _Link(client, socket.socket()).reset()
                continue
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                _Link(client, socket.socket()).reset()
                continue
            link = _Link(client, upstream)
            with self._lock:
                self._links.append(link)
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(link, src, dst), daemon=True,
                                 name=f"fault-proxy-{self.port}-pump").start()

    def _flowing(self, link: _Link) -> bool:
        return self._mode == "pass" and not link.stranded

    def _pump(self, link: _Link, src: socket.socket, dst: socket.socket) -> None:
        """Copy ``src`` to ``dst`` while the link flows; read nothing while it stalls."""
        try:
            while not link.closed and not self._stopped.is_set():
                if not self._flowing(link):
                    self._stopped.wait(_TICK)
                    continue
                ready, _, _ = select.select([src], [], [], _TICK)
                if not ready or not self._flowing(link):
                    continue
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        if not link.closed:
            link.close()
