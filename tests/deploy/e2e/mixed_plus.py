"""The same project with its imports swapped to ``celery_plus``, on ``plus+redis://`` (the same
Redis server), in a mixed deployment: only ``durable`` is durable; ``legacy`` stays in kombu's
layout (same ``global_keyprefix`` as ``mixed_plain``). Workers load
``tests.deploy.e2e.mixed_plus:app`` with ``PLUS_TEST_PREFIX`` set. ``PLUS_TEST_MIXED_BROKER``
swaps the durable store (e.g. ``plus+postgresql://…``, one schema per prefix:
``proj.pg_schema``); the legacy queues then stay on the Redis server (``plus_legacy_url``).
"""

from __future__ import annotations

import os

from celery_plus import Celery

from .mixed_tasks import DURABLE, LEGACY, REDIS_URL, keyprefix, register
from .proj import pg_schema


def make_app(prefix: str) -> Celery:
    broker = os.environ.get("PLUS_TEST_MIXED_BROKER", f"plus+{REDIS_URL}")
    app = Celery("mixed", broker=broker, set_as_current=False)
    if not broker.startswith("plus+redis"):
        app.conf.update(plus_legacy_url=REDIS_URL, plus_pg_schema=pg_schema(prefix))
    app.conf.update(
        plus_key_prefix=prefix,
        plus_durable_queues=[DURABLE],
        plus_visibility_timeout=5.0,
        plus_maintenance_interval=0.25,
        plus_poll_interval=0.5,
        broker_transport_options={"global_keyprefix": keyprefix(prefix)},
        task_default_queue=LEGACY,
        task_ignore_result=True,
        worker_hijack_root_logger=False,
    )
    register(app, prefix)
    return app


app = make_app(os.environ.get("PLUS_TEST_PREFIX", "mixed"))
