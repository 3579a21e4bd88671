"""The start-up check of a Redis server's ``maxmemory-policy``: one that may evict the
store's keys loses jobs.

Under ``allkeys-*`` a full server deletes any key, a job's record or message as well as a
queue; under ``volatile-*`` it deletes keys with a TTL, which the store gives to the holds of
unique keys, the rate-limit windows, beat's leader lease and transient (reply) queues: a unique
job would run twice, a rate limit or beat's leadership be lost, a reply vanish. Either way
the job a worker held or was about to claim can vanish under it. Only ``noeviction`` (writes
refused when full: an outage, ``refusals.py``) keeps every acknowledged job.

``plus_redis_allow_eviction = True`` skips the refusal (a deployment that accepts the loss).
A server that does not allow ``CONFIG GET`` (many managed services) is only warned about.
"""

from __future__ import annotations

import logging
from typing import Any

import redis
from celery.exceptions import ImproperlyConfigured
from kombu.utils.url import maybe_sanitize_url

logger = logging.getLogger("celery_plus.stores.redis")

#: The one policy under which the server never deletes a key of the store.
SAFE_POLICY = "noeviction"


def current_policy(client: Any) -> str | None:
    """The server's ``maxmemory-policy``; None if the server does not say (``CONFIG`` denied
    or renamed, a proxy)."""
    try:
        reply = client.config_get("maxmemory-policy")
    except redis.exceptions.ConnectionError:
        raise
    except redis.exceptions.ResponseError as exc:
        logger.warning(
            "celery-plus: cannot read the Redis store's maxmemory-policy (%s). Make sure it is "
            "'noeviction': a server that evicts keys when full loses jobs "
            "(docs/reliability.md, 'A full or evicting store').", exc)
        return None
    value = (reply or {}).get("maxmemory-policy")
    if isinstance(value, bytes):
        value = value.decode()
    return None if value is None else str(value)


def check_policy(client: Any, url: str, allow_eviction: bool) -> None:
    """Refuse a store whose server may evict its keys (unless ``allow_eviction``)."""
    policy = current_policy(client)
    if policy is None or policy == SAFE_POLICY:
        return
    if allow_eviction:
        logger.warning("celery-plus: the Redis store runs with maxmemory-policy=%s "
                       "(plus_redis_allow_eviction=True): jobs may be lost when it is full.",
                       policy)
        return
    raise ImproperlyConfigured(
        f"The Redis store of broker_url 'plus+{maybe_sanitize_url(url)}' runs with "
        f"maxmemory-policy={policy!r}: when full it deletes keys, and with them jobs "
        "(acknowledged publishes vanish, claimed jobs lose their message, unique holds lapse). "
        f"Set it to noeviction (CONFIG SET maxmemory-policy {SAFE_POLICY}, and in redis.conf): "
        "a full server then refuses writes and workers wait until memory is freed. To run "
        "anyway, accepting lost jobs, set plus_redis_allow_eviction=True.")
