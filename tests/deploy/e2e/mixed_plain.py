"""A plain Celery project (it imports ``celery``, never ``celery_plus``) on ``redis://``: the
side of a mixed deployment that has not migrated. Workers load ``tests.deploy.e2e.mixed_plain:app``
with ``PLUS_TEST_PREFIX`` set; tests build their own client with :func:`make_app`.
"""

from __future__ import annotations

import os

from celery import Celery

from .mixed_tasks import LEGACY, REDIS_URL, keyprefix, register


def make_app(prefix: str) -> Celery:
    app = Celery("mixed", broker=REDIS_URL, set_as_current=False)
    app.conf.update(
        broker_transport_options={"global_keyprefix": keyprefix(prefix)},
        task_default_queue=LEGACY,
        task_ignore_result=True,
        worker_hijack_root_logger=False,
    )
    register(app, prefix)
    return app


app = make_app(os.environ.get("PLUS_TEST_PREFIX", "mixed"))
