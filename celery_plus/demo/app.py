"""The app ``celery-plus demo`` workers load: ``-A celery_plus.demo.app``.

No broker is configured, so it runs on the embedded default: the SQLite file
``./.celery-plus/celery_plus.demo.db`` under the worker's working directory (the demo starts
its workers in a temporary directory), with results in the same file.
"""

from __future__ import annotations

from celery_plus.demo.tasks import make_app

app = make_app()
