"""Settings of proj, read from the environment as a deployed project reads them.

``PROJ_BROKER_URL`` / ``PROJ_RESULT_BACKEND``: broker and result backend URLs.
``PROJ_PREFIX``: this deployment's name on shared servers: every queue is named after it and
every Redis key (broker, results, recorded side effects) lives under ``PROJ_PREFIX:``.
``PROJ_PG_SCHEMA``: the PostgreSQL schema, when the broker is on PostgreSQL.
"""

import os

PREFIX = os.environ.get("PROJ_PREFIX", "proj")

broker_url = os.environ.get("PROJ_BROKER_URL", "redis://127.0.0.1:6379/0")
result_backend = os.environ.get("PROJ_RESULT_BACKEND", "redis://127.0.0.1:6379/1")
broker_connection_retry_on_startup = True
broker_transport_options = {"global_keyprefix": f"{PREFIX}:"}
result_backend_transport_options = {"global_keyprefix": f"{PREFIX}:"}
result_expires = 3600
result_extended = True
task_track_started = True
timezone = "UTC"

# Queues: everything on <prefix>.default unless routed.
DEFAULT_QUEUE = f"{PREFIX}.default"
URGENT_QUEUE = f"{PREFIX}.urgent"
REPORTS_QUEUE = f"{PREFIX}.reports"
QUEUES = (DEFAULT_QUEUE, URGENT_QUEUE, REPORTS_QUEUE)
task_default_queue = DEFAULT_QUEUE
task_routes = {
    "proj.tasks.arithmetic.mul": {"queue": URGENT_QUEUE},
    "proj.tasks.reports.*": {"queue": REPORTS_QUEUE},
}

beat_schedule = {
    "tick-every-second": {
        "task": "proj.tasks.reports.tick",
        "schedule": 1.0,
        "args": ("beat",),
    },
}

# Settings of the durable transport; plain Celery ignores them.
plus_key_prefix = PREFIX
plus_pg_schema = os.environ.get("PROJ_PG_SCHEMA", "celery_plus")
