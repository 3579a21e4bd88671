"""Flower on a ``plus+`` broker: its Broker page and ``/api/queues/length`` read the store.

Flower asks a broker class, chosen by the URL's scheme, for the length of each active queue;
it knows ``amqp``, ``redis`` and their variants and answers 404 for any other. :func:`install`
gives Flower's handlers a broker that answers from the celery-plus store of Flower's app
(through the admin's :meth:`~celery_plus.admin.api.Admin.status`); any other app keeps
Flower's own. ``celery-plus -A proj flower`` installs it; under ``celery -A proj flower``, a
Flower config file does (``--conf=flowerconfig.py``)::

    # flowerconfig.py
    from celery_plus.contrib.flower import install
    install()

Each queue row: ``messages_ready`` (enqueued: a worker may take it now),
``messages_unacknowledged`` (running: claimed, under a lease), ``messages`` (every unfinished
job of the queue: ready, running, waiting for its ETA or for a concurrency slot).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from typing import Any

from celery_plus.admin import api
from celery_plus.model.admin import UnsupportedStore
from celery_plus.stores.registry import store_location

logger = logging.getLogger(__name__)


class PlusBroker:
    """Flower's broker interface (``async queues(names)``) over a celery-plus app's store."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def queues(self, names: Iterable[str]) -> list[dict[str, Any]]:
        """One row per queue name, in the order given (Flower's RabbitMQ field names)."""
        return await asyncio.to_thread(self.lengths, list(names))

    def lengths(self, names: list[str]) -> list[dict[str, Any]]:
        with api.connect(self.app) as admin:
            rows = {row.queue: row for row in admin.status().queues}
        out = []
        for name in names:
            row = rows.get(name)
            ready = row.enqueued if row else 0
            running = (row.running + row.reserved) if row else 0  # both claimed, unacked
            waiting = (row.scheduled + row.blocked) if row else 0
            out.append({"name": name, "messages": ready + running + waiting,
                        "messages_ready": ready, "messages_unacknowledged": running})
        return out


def is_plus_app(app: Any) -> bool:
    """Whether ``app``'s broker is a celery-plus store (transport ``plus``)."""
    try:
        store_location(app)
    except UnsupportedStore:
        return False
    return True


def install() -> None:
    """Make Flower's broker views answer from the store on a celery-plus app (idempotent)."""
    from flower.views import BaseHandler

    if not callable(getattr(BaseHandler, "get_broker", None)):
        logger.warning("celery-plus: this Flower has no BaseHandler.get_broker (written for "
                       "Flower 2.2): its Broker page and /api/queues/length stay Flower's own")
        return
    flower_broker = getattr(BaseHandler.get_broker, "flower_get_broker", BaseHandler.get_broker)

    def get_broker(handler: Any) -> Any:
        if is_plus_app(handler.capp):
            return PlusBroker(handler.capp)
        return flower_broker(handler)

    get_broker.flower_get_broker = flower_broker  # type: ignore[attr-defined]
    BaseHandler.get_broker = get_broker
