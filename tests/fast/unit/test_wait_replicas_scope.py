"""``plus_redis_wait_replicas`` is a Redis Cluster store's setting (``WAIT`` after each publish:
docs/redis-cluster.md). On another Redis store it is refused when the transport is made, not
ignored: a publisher asking for replica-confirmed publishes must not get weaker ones silently."""

from __future__ import annotations

import pytest
from celery.exceptions import ImproperlyConfigured

from celery_plus.settings import resolve
from celery_plus.stores.registry import open_store


@pytest.mark.parametrize("url", ["redis://127.0.0.1:1/0", "rediss://127.0.0.1:1/0",
                                 "sentinel://127.0.0.1:1"])
def test_wait_replicas_on_a_store_that_does_not_wait_is_an_error(url: str) -> None:
    with pytest.raises(ImproperlyConfigured, match="plus_redis_wait_replicas"):
        open_store(url, resolve({"plus_redis_wait_replicas": 1}))


def test_wait_replicas_on_a_cluster_store_is_taken() -> None:
    backend = open_store("redis+cluster://127.0.0.1:1",
                           resolve({"plus_redis_wait_replicas": 1}))
    assert backend.options.wait_replicas == 1
    open_store("redis://127.0.0.1:1/0", resolve({}))  # the default: no error
