"""A plain Celery project (it imports ``celery``, never ``celery_plus``) on RabbitMQ: the
deployment ``migrate-queue --legacy-url amqp://…`` moves from. Its task queue and exchange are
named after the test's prefix (:func:`queue_name`), so tests share no RabbitMQ queue."""

from __future__ import annotations

import os

from celery import Celery

from .mixed_tasks import register

AMQP_URL = os.environ.get("PLUS_TEST_AMQP", "amqp://guest:guest@127.0.0.1:5672//")


def queue_name(prefix: str) -> str:
    return f"{prefix}.rabbit"


def make_app(prefix: str) -> Celery:
    app = Celery("rabbit", broker=AMQP_URL, set_as_current=False)
    app.conf.update(task_default_queue=queue_name(prefix), task_ignore_result=True,
                    worker_hijack_root_logger=False)
    register(app, prefix)
    return app
