"""The one rule that names the Redis store's keys: ``<prefix>:<kind>:<name>``, where the
prefix is the deployment's (``plus``) on one server and ``plus:{<scope>}`` on a Redis Cluster.

``lua/lib.lua`` documents the key kinds as ``P:<kind>…``; every key a script touches is built
from ``P`` (the script's ``ARGV[1]``, also its ``KEYS[1]``). On a cluster ``P`` carries a hash
tag, so all of one scope's keys are in one slot:

* ``q:<queue>`` — everything of one queue: its job zset, the job records and envelopes of its
  jobs, its schedule, leases, unique holds, concurrency slots and rate-limit logs, counters;
* ``x:<exchange>`` — an exchange's bindings (the two keys of ``bind``);
* ``g`` — the store-wide rest: beat's leader lease, schedule entries, the queue registry,
  transient queues (remote control, replies) and their marks.

Standalone Redis and Sentinel stay in the unscoped layout, byte for byte.
"""

from __future__ import annotations

#: Scope of the store-wide keys on a cluster.
GLOBAL = "g"


def scoped_prefix(prefix: str, scope: str | None) -> str:
    """The key prefix of ``scope``: ``prefix`` itself on one server (``scope`` None)."""
    return prefix if scope is None else f"{prefix}:{{{scope}}}"


def queue_scope(queue: str) -> str:
    return f"q:{queue}"


def exchange_scope(exchange: str) -> str:
    return f"x:{exchange}"
