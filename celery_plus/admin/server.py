"""``celery-plus admin``: the dashboard served by waitress, a production WSGI server.

Waitress (the ``admin`` extra: ``pip install 'celery-plus[admin]'``; docs/decisions.md says
why) reads each request completely in its event loop before a worker thread sees it, so a
client that connects and sends nothing, or sends slowly, holds no thread: every other page
and ``/metrics`` keep answering. Idle connections are closed after :data:`CHANNEL_TIMEOUT`
seconds, at most :data:`CONNECTION_LIMIT` are open at once, and request bodies over the
dashboard's own limit are refused before they are read.

A client that sends slowly cannot hold the connections either (slowloris: more than
:data:`CONNECTION_LIMIT` connections, each sending a header line every few seconds, kept every
page and ``/metrics`` from answering for as long as they went on): a request must arrive
whole within :data:`REQUEST_TIMEOUT` seconds of its first byte, and one client address holds
at most :data:`PER_CLIENT_LIMIT` connections (the trusted proxy's address excepted; more are
closed at once).

Behind a reverse proxy that terminates TLS, ``--trusted-proxy <its address>`` makes waitress
take the client's scheme, host and address from its ``X-Forwarded-*`` headers (only from that
address): cookies are then ``Secure`` and ``plus_admin_allowed_hosts`` checks the public
name.
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any, cast

from celery_plus.admin import admission, deadline
from celery_plus.admin.admission import address_of
from celery_plus.admin.dispatch import FIRST, SHARED, Classify, FairDispatcher
from celery_plus.admin.security import LOOPBACK_HOSTS, OPERATOR, READER, Access
from celery_plus.admin.web import MAX_FORM_BYTES, make_app

#: Worker threads answering requests.
THREADS = 8
#: Threads only operators' requests may use (readers and anonymous share the others).
OPERATOR_THREADS = 3
#: Threads one other client (role and address) may hold at once.
CLIENT_THREADS = 2
#: Seconds a request may wait for a thread before it is answered 503.
QUEUE_DEADLINE = 10.0
#: Sockets open at once, past which waitress stops accepting (admission keeps fewer).
SOCKET_LIMIT = 1000
#: Seconds an idle or silent connection is kept.
CHANNEL_TIMEOUT = 30
#: Connections open at once: a new one closes the one worth the least (:mod:`.admission`).
CONNECTION_LIMIT = 200
BACKLOG = 256
#: Connections taken from the listen backlog on one turn of the server's loop.
ACCEPT_BATCH = 256
#: Connections closed beyond the need at once when a bound is passed (fewer looks at all).
EVICT_SLACK = 16
#: Bytes of a new connection's waiting request read for its credentials.
PEEK_BYTES = 8192
#: Seconds the kernel holds a new connection that has sent nothing before handing it over
#: (Linux's ``TCP_DEFER_ACCEPT``): a silent socket takes no room meanwhile, so an operator
#: whose request follows its connect by a round trip (``ssh -L``, from 127.0.0.1 like a
#: local flood) arrives with its credentials instead of being evicted as silent first
#: (issue #28: 0-2 of 19 pages with 150 silent reconnecting sockets, 19 of 19 held back).
DEFER_ACCEPT = 5
#: Seconds a request (its headers and body) may take to arrive, from its first byte.
REQUEST_TIMEOUT = 20.0
#: Connections one client address may hold at once (half the limit): past it, a new
#: connection of that address closes that address's connection worth the least.
PER_CLIENT_LIMIT = CONNECTION_LIMIT // 2
_WILDCARD = ("0.0.0.0", "::", "")


def _channel_class(request_timeout: float, per_client: int, exempt: str | None,
                   rank: Callable[[str | None], int]) -> type:
    """waitress's connection class, with a deadline for each request to arrive, and room
    made for each new connection by closing the one worth the least (:mod:`.admission`;
    ``exempt``: the trusted proxy's address, which has no per-address share; ``*``, which
    waitress takes for "any address may be the proxy", exempts every address)."""
    from waitress.channel import HTTPChannel
    from waitress.task import WSGITask

    class DashboardTask(WSGITask):
        """waitress's task; the answer of a connection evicted meanwhile is its last."""

        def build_response_header(self) -> bytes:
            if self.channel.evicted:  # (read by waitress, which then says Connection: close)
                self.request.headers["CONNECTION"] = "close"
            return bytes(super().build_response_header())

        def service(self) -> None:
            super().service()
            if self.channel.evicted:  # (evicted after its header was written)
                self.close_on_finish = True

    class DashboardChannel(HTTPChannel):
        task_class = DashboardTask
        request_started = 0.0
        #: A thread is answering one of its requests.
        serving = False
        #: It was evicted while being answered: closed once that answer is written, the
        #: requests it pipelined after it dropped.
        evicted = False

        def __init__(self, server: Any, sock: Any, addr: Any, adj: Any,
                     map: Any = None) -> None:
            super().__init__(server, sock, addr, adj, map)
            self.host = address_of(addr)
            # A client's request is usually waiting already when its connection is taken:
            # its credentials give the connection its standing before any flood can evict it.
            self.standing = admission.standing_of(_waiting(sock), rank)
            self.since = time.monotonic()
            share = CONNECTION_LIMIT + 1 if exempt == "*" else per_client
            ledger = server.__dict__.setdefault("plus_ledger", admission.Ledger())
            ledger.add(self)
            admitted, victims = admission.make_room(
                list(server.active_channels.values()), self, ledger, CONNECTION_LIMIT, share,
                exempt, EVICT_SLACK)
            # Victims are closed by the next turn of the loop, not now: closed now, a file
            # descriptor could be reused by the next connection accepted on this turn, which
            # would then get the events polled for the closed one.
            for victim in victims:
                cast(Any, victim).close_soon()
            if not admitted:
                self.close_soon()  # nothing may make room: the newcomer goes

        def recheck(self) -> bool:
            if self.request is not None or self.requests:
                return False  # (reading has begun: it is waitress's now)
            self.standing = admission.standing_of(_waiting(self.socket), rank)
            return self.standing != admission.UNPROVEN

        def close_soon(self) -> None:
            """Close it by the next turn of the loop: once the answer a thread is making
            of it, or the one it is sending, is written; its queued requests unanswered."""
            if self.serving:
                self.evicted = True
            elif self.total_outbufs_len and not self.requests:
                self.close_when_flushed = True
            else:
                self.will_close = True
            self.server.plus_ledger.drop(self)

        def service(self) -> None:
            self.serving = True
            try:
                super().service()
            finally:
                self.serving = False
                with self.requests_lock:
                    if self.evicted and not self.requests:  # (evicted after its last answer)
                        self.close_when_flushed = True

        def del_channel(self, map: Any = None) -> None:
            self.server.plus_ledger.drop(self)
            super().del_channel(map)

        @property
        def busy(self) -> bool:
            return bool(self.requests) or bool(self.total_outbufs_len)

        @property
        def closing(self) -> bool:
            return bool(self.will_close or self.close_when_flushed or self.evicted)

        def received(self, data: bytes) -> bool:
            if self.request is None and data:
                self.request_started = time.monotonic()
            return bool(super().received(data))

        def readable(self) -> bool:
            # (asked of every connection on each turn of waitress's loop, at least each second)
            if self.evicted:
                return False  # (what it pipelined is not answered)
            if self.request is not None and not self.will_close and (
                    time.monotonic() - self.request_started > request_timeout):
                self.will_close = True  # closed by the next turn (``writable`` says so)
            return bool(super().readable())

    return DashboardChannel


def _waiting(sock: Any) -> bytes:
    """What the client has sent already, left unread."""
    try:
        return bytes(sock.recv(PEEK_BYTES, socket.MSG_PEEK | socket.MSG_DONTWAIT))
    except OSError:
        return b""


_RANKS = {OPERATOR: admission.OPERATOR_RANK, READER: admission.READER_RANK}


def _ranker(access: Access) -> Callable[[str | None], int]:
    """The standing (:mod:`.admission`) an ``Authorization`` header gives."""

    def rank(header: str | None) -> int:
        who = access.identify({"HTTP_AUTHORIZATION": header} if header else {})
        return _RANKS.get(who.role, admission.ANONYMOUS_RANK)

    return rank


def _classifier(rank: Callable[[str | None], int], proxy: str | None) -> Classify:
    """Files each request under its client (:mod:`.dispatch`): operators first; everyone
    else by role and address — behind the trusted ``proxy``, the address it forwards for
    (``X-Forwarded-For``'s last entry, the one the proxy added). It also records the
    connection's standing (:mod:`.admission`)."""

    def classify(channel: Any) -> tuple[int, Hashable]:
        request = channel.requests[0] if channel.requests else None
        headers = request.headers if request is not None else {}
        standing = rank(headers.get("AUTHORIZATION"))
        channel.standing = max(getattr(channel, "standing", 0), standing)
        channel.since = time.monotonic()
        host = getattr(channel, "host", "")
        if proxy is not None and proxy in (host, "*"):
            host = headers.get("X_FORWARDED_FOR", host).rpartition(",")[2].strip()
        kind = FIRST if standing == admission.OPERATOR_RANK else SHARED
        return kind, (standing, host)

    return classify


class BadAddress(ValueError):
    """The host or port is not one to listen on (waitress refused it)."""


class MissingServer(RuntimeError):
    """waitress is not installed."""

    def __str__(self) -> str:
        return ("celery-plus admin serves the dashboard with waitress, which is not installed: "
                "pip install 'celery-plus[admin]' (or mount make_app(app) in your own WSGI "
                "server; docs/admin.md)")


def bound_hosts(host: str) -> tuple[str, ...]:
    """Host names answered to besides the allowed ones: the address served on (unless a
    wildcard, which names no host)."""
    return () if host in _WILDCARD or host in LOOPBACK_HOSTS else (host.strip("[]"),)


def create(target: Any, host: str, port: int, *, allowed_hosts: Sequence[str] = (),
           trusted_proxy: str | None = None, threads: int = THREADS,
           request_timeout: float = REQUEST_TIMEOUT,
           per_client: int = PER_CLIENT_LIMIT) -> Any:
    """A waitress server for the dashboard of ``target`` (not yet serving)."""
    try:
        from waitress.server import create_server
    except ImportError:
        raise MissingServer() from None
    app = make_app(target, extra_hosts=(*bound_hosts(host), *allowed_hosts))
    options: dict[str, Any] = {}
    if trusted_proxy:
        options = {"trusted_proxy": trusted_proxy, "trusted_proxy_count": 1,
                   "trusted_proxy_headers": {"x-forwarded-for", "x-forwarded-host",
                                             "x-forwarded-proto", "x-forwarded-port"}}
    reserved = min(OPERATOR_THREADS, threads - 1) if not app.access.read_only else 0
    rank = _ranker(app.access)
    dispatcher = FairDispatcher(_classifier(rank, trusted_proxy), shared=threads - reserved,
                                per_client=CLIENT_THREADS, deadline=QUEUE_DEADLINE)
    try:
        # poll, not select: select cannot watch a socket numbered 1024 or more.
        # channel_request_lookahead: a connection stays read while its request runs, so a
        # client that leaves is seen (waitress.client_disconnected; a queued request of a
        # client that left is dropped unrun).
        server = create_server(app, _dispatcher=dispatcher, host=host, port=port,
                               threads=threads, channel_timeout=CHANNEL_TIMEOUT,
                               connection_limit=SOCKET_LIMIT, backlog=BACKLOG,
                               asyncore_use_poll=True, channel_request_lookahead=1,
                               max_request_body_size=MAX_FORM_BYTES,
                               cleanup_interval=min(CHANNEL_TIMEOUT, 10), ident="celery-plus",
                               **options)
    except ValueError as exc:  # waitress: "Invalid host/port specified."
        app.close()
        raise BadAddress(str(exc)) from None
    dispatcher.set_thread_count(threads)
    channel = _channel_class(request_timeout, per_client, trusted_proxy, rank)
    for listener in _listeners(server):
        if hasattr(socket, "TCP_DEFER_ACCEPT") and listener.socket.family in (
                socket.AF_INET, socket.AF_INET6):  # (Linux; elsewhere admission alone)
            listener.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_DEFER_ACCEPT,
                                       DEFER_ACCEPT)
        listener.channel_class = channel
        listener.handle_accept = _accept_all(listener)
    server.dashboard = app
    return server


def _accept_all(listener: Any) -> Any:
    """waitress's ``handle_accept``, taking every waiting connection (up to
    :data:`ACCEPT_BATCH`) instead of one per turn of its loop: behind a flood of reconnecting
    sockets the operator's connection waited a turn for each one queued before it."""

    def handle_accept() -> None:
        for _ in range(ACCEPT_BATCH):
            try:
                pair = listener.accept()  # (None: none waiting)
            except OSError:
                return
            if pair is None:
                return
            conn, addr = pair
            try:
                listener.set_socket_options(conn)
            except OSError:  # (the client has gone already)
                conn.close()
                continue
            listener.channel_class(listener, conn, listener.fix_addr(addr), listener.adj,
                                   map=listener._map)

    return handle_accept


def _listeners(server: Any) -> list[Any]:
    """The listening sockets' servers (waitress returns a wrapper of several when the host
    name resolves to more than one address)."""
    found = getattr(server, "map", None)
    if found is None or hasattr(server, "channel_class"):
        return [server]
    return [s for s in found.values() if hasattr(s, "channel_class")]


def serve(target: Any, host: str = "127.0.0.1", port: int = 8055, **options: Any) -> None:
    """Serve until interrupted (Ctrl+C)."""
    deadline.postgres_options()  # (this process serves the dashboard only)
    server = create(target, host, port, **options)
    dashboard = server.dashboard
    if dashboard.access.read_only:
        mode = "read-only, open to anyone who reaches it"
    elif dashboard.access.public_read:
        mode = "pages open, actions need plus_admin_token"
    else:
        mode = "plus_admin_token (or plus_admin_read_token) required"
    if host.strip("[]") not in LOOPBACK_HOSTS and dashboard.access.read_only:
        print(f"warning: {host}:{port} serves the dashboard to anyone who reaches it: set "
              "plus_admin_token (and plus_admin_read_token) or keep it on 127.0.0.1",
              file=sys.stderr)
    print(f"celery-plus admin on http://{_url_host(host)}:{port}/ ({mode}; Ctrl+C to stop)",
          flush=True)
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
        dashboard.close()


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def stop(server: Any, timeout: float = 5.0) -> None:
    """Stop a server that :meth:`run` serves in another thread: its task threads, every
    open connection and the listening socket (``run`` then returns).

    The sockets are closed by the serving thread itself (waitress's trigger runs the
    closing there): closed from this thread, a socket the serving thread was waiting on made
    its ``select`` fail (EBADF), and ``run`` raised instead of returning."""
    from waitress.trigger import trigger

    server.task_dispatcher.shutdown()
    channels = getattr(server, "_map", None)
    if channels is None:
        channels = server.map  # (waitress's server of several listening sockets)
    closed = threading.Event()

    def close_all() -> None:
        for channel in list(channels.values()):
            channel.close()
        closed.set()

    wake = next((c for c in list(channels.values()) if isinstance(c, trigger)), None)
    if wake is not None:
        wake.pull_trigger(close_all)
    if not closed.wait(timeout if wake is not None else 0):
        close_all()  # (not being served: nobody else would close them)
    server.dashboard.close()
