"""Replies by which a Redis server refuses writes for now: a store outage, not an error.

A server over ``maxmemory`` under ``noeviction`` (``OOM``), one short of the replicas
``min-replicas-to-write`` asks for (``NOREPLICAS``), a read-only replica (``READONLY``: a failover
in progress), a replica cut off from its primary (``MASTERDOWN``) or one that cannot save
its snapshot (``MISCONF``) answers every write with an error reply. The call itself is fine
and will succeed once the server can write again, so the reply is turned, as it is parsed,
into :class:`StoreRefused`, a redis-py ``ConnectionError``: one of the transport's
``connection_errors``. The worker then does what it does when the store is unreachable
(Celery reconnects with back-off, the lease keeper retries, acks wait in the worker) instead
of exiting with "Unrecoverable error".

This is the one place the Redis store classifies such replies: every connection of its
clients parses replies with :class:`RefusingParser` (``connect.py``).
"""

from __future__ import annotations

import logging
import re

import redis
import redis.utils
from redis._parsers import _RESP2Parser, _RESP3Parser
from redis.connection import DefaultParser

from celery_plus.runtime.throttled import Throttled

logger = logging.getLogger("celery_plus.stores.redis")

#: Error codes of a server refusing writes for now, and what brings it back.
REFUSALS = {
    "OOM": "the server is over maxmemory under noeviction: free memory or raise maxmemory",
    "NOREPLICAS": "fewer replicas than min-replicas-to-write are connected",
    "READONLY": "the server is a read-only replica (a failover in progress?)",
    "MISCONF": "the server cannot persist (stop-writes-on-bgsave-error): fix its disk",
    "MASTERDOWN": "the replica lost its primary (replica-serve-stale-data no)",
}
#: A refusal inside a script's error reply (Redis 6.2 wraps ``redis.call`` errors).
_INNER = re.compile(r"(?:^|[\s:-])(" + "|".join(REFUSALS) + r")\b")
#: Least time between two warnings of the same refusal in one process.
WARN_EVERY_S = 30.0
_warnings = Throttled(logger, WARN_EVERY_S)


class StoreRefused(redis.exceptions.ConnectionError):
    """The Redis store refused a write for now (``OOM``, ``NOREPLICAS``, ``READONLY``,
    ``MISCONF``): retried like a lost connection, never a task's or worker's failure."""

    def __init__(self, code: str, reply: str) -> None:
        super().__init__(f"Redis store refuses writes: {reply} ({REFUSALS[code]}; "
                         "celery-plus waits and resumes by itself)")
        self.code = code
        self.reply = reply


def refusal_code(reply: str) -> str | None:
    """The refusal code of an error reply (without its ``-``), or None for any other error."""
    code = reply.split(" ", 1)[0]
    if code in REFUSALS:
        return code
    if "Error running script" in reply or "script:" in reply:
        match = _INNER.search(reply)
        return match[1] if match else None
    return None


def refused(reply: str) -> StoreRefused | None:
    """:class:`StoreRefused` for a refusal reply (warning once per ``WARN_EVERY_S``), else None."""
    code = refusal_code(reply)
    if code is None:
        return None
    error = StoreRefused(code, reply)
    _warnings.warn(code, str(error))
    return error


def _base_parser() -> type:
    """The parser redis-py would pick: hiredis if installed, else the one of its default
    protocol (RESP3 since redis-py 6; redis-py switches only its own RESP2 class)."""
    if DefaultParser is _RESP2Parser and getattr(redis.utils, "DEFAULT_RESP_VERSION", 2) == 3:
        return _RESP3Parser
    return DefaultParser


class RefusingParser(_base_parser()):  # type: ignore[misc]
    """redis-py's parser, with write refusals parsed as :class:`StoreRefused`."""

    @classmethod
    def parse_error(cls, response: str) -> redis.exceptions.RedisError:
        return refused(response) or super().parse_error(response)
