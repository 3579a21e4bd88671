"""The app of the queue-pause drain (``e2e/test_queue_pause.py``): one task that appends each
run to an external ledger, a Redis list (``{prefix}:ledger``) of ``[task id, start, end,
pid]``, so the test counts runs from what the tasks themselves recorded.

Workers load ``tests.deploy.e2e.pause_proj:app`` (prefix and broker from the environment, as
``proj.py``); the test process builds its client with :func:`make_app`.
"""

from __future__ import annotations

import json
import os
import time

import redis
from celery import current_task

from celery_plus import Celery
from tests.deploy.e2e.proj import REDIS_URL, pg_schema

QUEUE = "drain"


def ledger_key(prefix: str) -> str:
    return f"{prefix}:ledger"


def make_app(prefix: str) -> Celery:
    broker = os.environ.get("PLUS_TEST_BROKER", f"plus+{REDIS_URL}")
    app = Celery("pause", broker=broker, backend=None, set_as_current=False)
    app.conf.update(plus_key_prefix=prefix, plus_pg_schema=pg_schema(prefix),
                    plus_maintenance_interval=0.25, task_default_queue=QUEUE,
                    task_ignore_result=True, worker_hijack_root_logger=False)
    ledger = redis.Redis.from_url(REDIS_URL)

    @app.task(name="pause.run")
    def run(n: int, seconds: float) -> int:
        start = time.time()
        if seconds:
            time.sleep(seconds)
        ledger.rpush(ledger_key(prefix), json.dumps([current_task.request.id, start,
                                                     time.time(), os.getpid()]))
        return n

    return app


app = make_app(os.environ.get("PLUS_TEST_PREFIX", "pause"))
