"""Worker bootsteps celery-plus adds: start-up validation and a report of the durable setup.

On a non-plus broker with ``plus_coordination_url`` the consumer also gets the coordination
gate (``coordination/gate.py``): claims in the coordination store before a delivery runs.

Leases, heartbeats and maintenance belong to the ``plus`` transport's consuming connection
(see ``leases/process_keeper.py``), so they work the same under ``celery-plus worker`` and
``celery worker``; this step checks the configuration before the worker consumes anything.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import bootsteps
from celery.exceptions import ImproperlyConfigured

from celery_plus.runtime import embedded_files
from celery_plus.worker.versions import check_versions

logger = logging.getLogger("celery_plus.worker")


class DurableSetup(bootsteps.StartStopStep):
    """Validate ``plus_*`` settings at start-up and log the durable configuration."""

    label = "celery-plus"

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        super().__init__(worker, **kwargs)
        check_versions()  # the pool patches were checked against these versions only
        app = worker.app
        plus_config = getattr(app, "plus_config", None)
        self.config = plus_config() if plus_config else None
        if self.config is not None:
            from celery_plus.coordination import check_worker

            check_worker(app)  # a coordination URL on a plus+ broker, unenforced options
            check_in_process_store(app, worker)
            uses_embedded = getattr(app, "uses_embedded_broker", None)
            if uses_embedded is not None and uses_embedded():
                label_embedded_banner(worker)

    def start(self, worker: Any) -> None:
        if self.config is not None:
            uses_embedded = getattr(worker.app, "uses_embedded_broker", None)
            if uses_embedded is not None and uses_embedded():
                path = worker.app.embedded_path
                logger.info("celery-plus: broker: embedded default (no broker configured): "
                            "%s", path)
                name = worker.app.main or ""
                elsewhere = embedded_files.worker_file_elsewhere(name, path)
                if elsewhere is not None:
                    logger.warning("celery-plus: another worker of app %r on this host serves "
                                   "the embedded file %s, this one %s: they never share jobs "
                                   "(start both from the same directory, or set "
                                   "broker_url)", name, elsewhere, path)
                embedded_files.record_worker(name, path)
            logger.info(
                "celery-plus: visibility timeout %.1fs, heartbeat %.1fs, max deliveries %d",
                self.config.visibility_timeout,
                self.config.heartbeat_interval,
                self.config.max_deliveries,
            )


#: The banner line of Celery's worker that names the broker (``celery/apps/worker.py``).
BANNER_TRANSPORT = ".> transport:   "


def label_embedded_banner(worker: Any) -> None:
    """Make the worker's banner say its broker is the embedded default (no broker was
    configured), on the ``transport:`` line, before the file's URL."""
    startup_info = getattr(worker, "startup_info", None)
    if startup_info is None:
        return

    def labelled(*args: Any, **kwargs: Any) -> str:
        text: str = startup_info(*args, **kwargs)
        return text.replace(BANNER_TRANSPORT,
                            BANNER_TRANSPORT + "embedded default (no broker configured): ", 1)

    worker.startup_info = labelled


def check_in_process_store(app: Any, worker: Any) -> None:
    """Refuse a process pool on ``plus+memory://``: the store lives in this process only.

    A prefork pool's processes are forks, each with a copy of the store as it was: what a
    task publishes there (a subtask, a retry's message) lands in the copy and is lost, and
    a worker in another process never sees what this one publishes. The solo, threads,
    gevent and eventlet pools run in this process and share the store.
    """
    url = str(app.conf.broker_url or "").split(";")[0].strip()
    if not url.startswith("plus+memory:"):
        return
    from celery.concurrency.prefork import TaskPool as Prefork

    pool = getattr(worker, "pool_cls", None)
    if isinstance(pool, type) and issubclass(pool, Prefork):
        raise ImproperlyConfigured(
            f"broker_url {url!r} is an in-process store: it lives in this process only, so "
            "a prefork pool's processes (forks, each with a copy of it) and any worker in "
            "another process cannot share it. Run the worker in the process that publishes, "
            "with pool='solo' or pool='threads' (celery.contrib.testing.worker.start_worker, "
            "or the celery_worker fixture of celery_plus.contrib.pytest), or use a store "
            "every process reaches (plus+sqlite:///file.db, plus+redis://, "
            "plus+postgresql://); see docs/configuration.md.")
    logger.info("celery-plus: %s is an in-process store: only this process publishes to it",
                url)


def install_bootsteps(app: Any) -> None:
    from celery_plus.coordination.gate import Gate

    app.steps["worker"].add(DurableSetup)
    app.steps["consumer"].add(Gate)  # coordinated mode only (a non-plus broker)
