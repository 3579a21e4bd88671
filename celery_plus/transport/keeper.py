"""The lease keeper: one background thread per consuming connection.

It renews the leases of every claim the connection holds (``plus_heartbeat_interval``),
flushes settles that other threads queued, and runs the cluster's throttled maintenance
(recovery of expired leases, promotion of due jobs, unblocking, pruning).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from .. import signals
from ..helper_threads import HelperThread

if TYPE_CHECKING:
    from . import Transport
    from .channel import Channel

logger = logging.getLogger("celery_plus.keeper")

TICK_S = 0.1


class LeaseKeeper(HelperThread):
    def __init__(self, transport: Transport) -> None:
        super().__init__(name="celery-plus-lease-keeper", daemon=True)
        self.transport = transport
        self._stopping = threading.Event()

    def stop(self) -> None:
        self._stopping.set()

    def run(self) -> None:
        config = self.transport.config
        next_heartbeat = time.monotonic() + config.heartbeat_interval
        next_maintenance = time.monotonic()
        while not self._stopping.wait(TICK_S):
            now = time.monotonic()
            try:
                self._flush()
                if now >= next_heartbeat:
                    next_heartbeat = now + config.heartbeat_interval
                    self._heartbeat()
                if now >= next_maintenance:
                    next_maintenance = now + config.maintenance_interval
                    self._maintain()
            except Exception as exc:
                logger.warning("celery-plus lease keeper: %r", exc)

    def _channels(self) -> list[Channel]:
        return [c for c in list(self.transport.channels) if c is not None and not c.closed]

    def _flush(self) -> None:
        for channel in self._channels():
            channel.flush_settles()
            channel.renew_transient()  # throttled; a task may be blocking the drain loop

    def _heartbeat(self) -> None:
        held = [pair for channel in self._channels() for pair in channel.qos.held()]
        for job_id in self.transport.backend.heartbeat(held):
            logger.warning("celery-plus: lease of job %s was lost (taken over)", job_id)
            signals.task_lease_lost.send(sender=None, task_id=job_id)

    def _maintain(self) -> None:
        backend = self.transport.backend
        if not backend.maintain(self.transport.worker_id):
            return
        for item in backend.recover():
            logger.warning("celery-plus: recovered job %s (%s)", item.job_id, item.outcome)
            signals.task_recovered.send(sender=None, task_id=item.job_id, outcome=item.outcome)
            if item.outcome == "dead":
                self.transport.report_dead_letters([(item.job_id, "delivery limit")])
