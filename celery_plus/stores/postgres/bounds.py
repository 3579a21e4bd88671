"""How long a PostgreSQL store connection may take: to connect, to notice a dead link, to
answer a statement.

* ``connect_timeout`` (``plus_pg_connect_timeout``): the whole connection set-up;
* a dead link (``plus_pg_dead_link_timeout``, *T*): TCP keepalives on (first probe after
  *T*/3 idle, then every *T*/10, given up after *T* in all) and libpq's ``tcp_user_timeout``
  (data sent but not acknowledged for *T*): the kernel then fails the socket;
* a reply (``plus_pg_reply_timeout``): the longest a store call waits for the server's
  answer to a statement. A link that stalls while the kernel still sees it alive (a proxy, a
  NAT or load balancer that stopped forwarding, a half-open session after a partition) is
  caught here: the connection is closed and the call fails with :class:`NoReply`, a lost
  connection (the pool is renewed). Waits that have their own timeout (``LISTEN``'s
  ``notifies(timeout=…)``) are not bounded by it.

libpq's own parameters in the URL (``?connect_timeout=…&keepalives_idle=…``) win over these.
"""

from __future__ import annotations

import inspect
import logging
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger("celery_plus.transport.postgres")


@dataclass(frozen=True)
class LinkBounds:
    """The time bounds of one store's connections (see the module docstring)."""

    connect_timeout: float = 5.0
    dead_link_timeout: float = 15.0
    #: None (the default, ``plus_pg_reply_timeout``): a statement may wait for its reply
    #: as long as the kernel keeps its link.
    reply_timeout: float | None = None

    def libpq_params(self, url: str) -> dict[str, Any]:
        """The keepalive and timeout parameters of a connection to ``url`` (those the URL
        does not set itself)."""
        from psycopg.conninfo import conninfo_to_dict

        dead = max(round(self.dead_link_timeout), 3)
        idle = max(dead // 3, 1)
        interval = max(dead // 10, 1)
        params = {
            "connect_timeout": max(round(self.connect_timeout), 1),
            "keepalives": 1,
            "keepalives_idle": idle,
            "keepalives_interval": interval,
            "keepalives_count": max((dead - idle) // interval, 1),
            "tcp_user_timeout": dead * 1000,
        }
        given = conninfo_to_dict(url)
        return {k: v for k, v in params.items() if k not in given}


DEFAULT_BOUNDS = LinkBounds()
_classes: dict[float | None, Any] = {}


def connection_class(reply_timeout: float | None) -> Any:
    """psycopg's ``Connection``, whose waits for a reply last at most ``reply_timeout``."""
    cls = _classes.get(reply_timeout)
    if cls is None:
        cls = _classes[reply_timeout] = _bounded_class(reply_timeout)
    return cls


def check_alive(conn: Any, within: float) -> None:
    """Send ``conn`` a trivial statement and wait at most ``within`` seconds for its reply
    (:class:`NoReply` past it, the connection closed)."""
    if not hasattr(conn, "bound"):
        conn.execute("SELECT 1")
        return
    conn.bound = within
    try:
        conn.execute("SELECT 1")
    finally:
        del conn.bound  # back to the class's reply timeout


class _Unanswered:
    """Marks an error raised because the server did not answer in time."""


def unanswered(exc: BaseException) -> bool:
    """Whether ``exc`` says the server did not answer in time (a statement's reply, or a
    connection's set-up): the link is stalled or dead, not the session ended."""
    from psycopg import errors

    return isinstance(exc, (_Unanswered, errors.ConnectionTimeout))


def connect_timed_out(exc: BaseException) -> bool:
    """Whether ``exc`` is a connection set-up that timed out."""
    from psycopg import errors

    return isinstance(exc, errors.ConnectionTimeout)


def reply_bound_supported() -> bool:
    """Whether the installed psycopg can bound a wait (``Connection.wait(timeout=…)``,
    psycopg 3.3 releases since late 2025); without it, only the kernel's bounds hold."""
    import psycopg
    from psycopg import errors

    return ("timeout" in inspect.signature(psycopg.Connection.wait).parameters
            and hasattr(errors, "_WaitTimeout"))


def _bounded_class(reply_timeout: float | None) -> Any:
    import psycopg
    from psycopg import errors

    if reply_timeout is not None and not reply_bound_supported():
        logger.warning(
            "celery-plus: psycopg %s cannot bound a wait for a reply: plus_pg_reply_timeout "
            "is not applied (a stalled link is failed by the kernel's keepalives and "
            "tcp_user_timeout only). Upgrade psycopg to bound it.", psycopg.__version__)
        return psycopg.Connection

    class NoReply(_Unanswered, psycopg.OperationalError):
        """The server did not answer a statement within the reply timeout."""

    class BoundedConnection(psycopg.Connection[Any]):
        """A connection whose waits without a timeout of their own end after
        ``reply_timeout`` seconds (an instance may set a shorter one for a while): the
        connection is then closed (its protocol state is unknown) and :class:`NoReply`
        raised."""

        bound: float | None = reply_timeout

        def wait(self, gen: Any, interval: float = 0.1, timeout: float | None = None) -> Any:
            bound = self.bound
            if timeout is not None or bound is None:
                return super().wait(gen, interval, timeout)
            try:
                return super().wait(gen, interval, bound)
            except errors._WaitTimeout as exc:
                self.pgconn.finish()
                raise NoReply(
                    f"no reply from PostgreSQL within {bound:g} s (a stalled or half-open "
                    "link; plus_pg_reply_timeout); the connection is closed") from exc

    BoundedConnection.__name__ = BoundedConnection.__qualname__ = "BoundedConnection"
    return BoundedConnection
