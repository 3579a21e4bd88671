"""The RabbitMQ project of ``rabbit_plain`` with its imports swapped to ``celery_plus``, on the
test's durable store (``PLUS_TEST_BROKER``; ``PLUS_TEST_PREFIX``): the app whose
``migrate-queue --legacy-url amqp://…`` moves the RabbitMQ queue and whose workers drain it."""

from __future__ import annotations

import os

from celery_plus import Celery

from .mixed_tasks import REDIS_URL, register
from .proj import pg_schema
from .rabbit_plain import queue_name


def make_app(prefix: str) -> Celery:
    app = Celery("rabbit", broker=os.environ.get("PLUS_TEST_BROKER", f"plus+{REDIS_URL}"),
                 set_as_current=False)
    app.conf.update(
        plus_key_prefix=prefix,
        plus_pg_schema=pg_schema(prefix),
        plus_maintenance_interval=0.25,
        plus_poll_interval=0.5,
        task_default_queue=queue_name(prefix),
        task_ignore_result=True,
        worker_hijack_root_logger=False,
    )
    register(app, prefix)
    return app


app = make_app(os.environ.get("PLUS_TEST_PREFIX", "rabbit"))
