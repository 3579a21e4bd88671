"""The same project with its imports swapped to ``celery_plus``, on ``plus+redis://`` (the same
Redis server), in a mixed deployment: only ``durable`` is durable; ``legacy`` stays in kombu's
layout (same ``global_keyprefix`` as ``mixed_plain``). Workers load
``tests.deploy.e2e.mixed_plus:app`` with ``PLUS_TEST_PREFIX`` set.
"""

from __future__ import annotations

import os

from celery_plus import Celery

from .mixed_tasks import DURABLE, LEGACY, REDIS_URL, keyprefix, register


def make_app(prefix: str) -> Celery:
    app = Celery("mixed", broker=f"plus+{REDIS_URL}", set_as_current=False)
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
