"""The Celery application of proj, configured from ``proj.settings``."""

from celery import Celery

app = Celery(
    "proj",
    include=[
        "proj.tasks.arithmetic",
        "proj.tasks.retries",
        "proj.tasks.limits",
        "proj.tasks.workflows",
        "proj.tasks.reports",
    ],
)
app.config_from_object("proj.settings")

# Signal handlers connect on import, in workers and in every process that sends tasks.
from proj import signals  # noqa: E402,F401
