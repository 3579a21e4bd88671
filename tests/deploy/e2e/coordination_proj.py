"""The app the coordination tests run: ``tests.deploy.e2e.proj``'s tasks on a NON-plus broker.

The broker (``PLUS_TEST_BROKER``: RabbitMQ ``amqp://`` or plain ``redis://``) and the
coordination store (``PLUS_TEST_COORDINATION``: ``redis://`` or ``postgresql://``) come from
the environment, as does the test's prefix (``PLUS_TEST_PREFIX``): it is the coordination
store's key prefix / PostgreSQL schema, the task queue's name (one queue per test on the
shared RabbitMQ) and, on a plain Redis broker, kombu's global key prefix.
"""

from __future__ import annotations

import os
from typing import Any

from celery_plus import Celery

from . import proj

COORDINATION_ENV = "PLUS_TEST_COORDINATION"


def make_app(prefix: str, **settings: Any) -> Celery:
    """``proj.make_app`` on ``PLUS_TEST_BROKER`` with the coordination store of the env."""
    app = proj.make_app(
        prefix,
        plus_coordination_url=os.environ.get(COORDINATION_ENV, proj.REDIS_URL) or None,
        plus_coordination_retry_delay=0.1,
        broker_transport_options={"global_keyprefix": f"{prefix}:"},
        **settings,
    )
    app.conf.task_default_queue = prefix
    return app


app = make_app(os.environ.get("PLUS_TEST_PREFIX", "plus-e2e"))
