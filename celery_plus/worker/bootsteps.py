"""Worker bootsteps celery-plus adds: start-up validation and a report of the durable setup.

On a non-plus broker with ``plus_coordination_url`` the consumer also gets the coordination
gate (``coordination/gate.py``): claims in the coordination store before a delivery runs.

Leases, heartbeats and maintenance belong to the ``plus`` transport's consuming connection
(see ``transport/keeper.py``), so they work the same under ``celery-plus worker`` and
``celery worker``; this step checks the configuration before the worker consumes anything.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import bootsteps

logger = logging.getLogger("celery_plus.worker")


class DurableSetup(bootsteps.StartStopStep):
    """Validate ``plus_*`` settings at start-up and log the durable configuration."""

    label = "celery-plus"

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        super().__init__(worker, **kwargs)
        app = worker.app
        plus_config = getattr(app, "plus_config", None)
        self.config = plus_config() if plus_config else None
        if self.config is not None:
            from celery_plus.coordination import check_worker

            check_worker(app)  # a coordination URL on a plus+ broker, unenforced options

    def start(self, worker: Any) -> None:
        if self.config is not None:
            logger.info(
                "celery-plus: visibility timeout %.1fs, heartbeat %.1fs, max deliveries %d",
                self.config.visibility_timeout,
                self.config.heartbeat_interval,
                self.config.max_deliveries,
            )


def install_bootsteps(app: Any) -> None:
    from celery_plus.coordination.gate import Gate

    app.steps["worker"].add(DurableSetup)
    app.steps["consumer"].add(Gate)  # coordinated mode only (a non-plus broker)
