"""The worker side of coordinated mode: claim before running, settle on every exit.

:class:`Gate` (a consumer bootstep) wraps the consumer's ``on_task_request``: before a delivery
of a task with extension options goes to the pool, its job is claimed by id in the
coordination store (``Backend.claim_job``: slot taken atomically, holds per window, a lease).

* claimed: the delivery runs; the request carries a :class:`Claimed`, whose ``end`` the
  request's ``acknowledge`` / ``reject`` call first, so the claim is settled like a durable
  delivery (ack = completed, or a dead letter when a failure was noted; reject with requeue
  = requeue; reject = dead letter) and the slot and hold are freed by the store's own settle.
* blocked (group full) / held (another claim runs the job, e.g. the broker redelivered it
  after a connection loss): the delivery is given back to the broker with an ETA a little
  later (``plus_coordination_retry_delay``; for a held job, when its lease runs out) and the
  original is acked. Nothing spins, nothing runs twice at once.
* finished (completed, dead-lettered, canceled): a stale redelivery; acked without running.
* missing (sent by a client without the coordination store): the job is recorded now, without
  its unique key (uniqueness is decided when a job is sent), then claimed.
* the store cannot be reached: given back with a delay, as when blocked.

:class:`~celery_plus.coordination.keeper.CoordinationKeeper`, started with the consumer, renews
this process's leases and runs the store's maintenance.
"""

from __future__ import annotations

import datetime as dt
import logging
import random
from typing import Any

from celery import bootsteps
from celery.signals import task_revoked
from celery.worker.state import task_ready
from kombu.utils.url import maybe_sanitize_url

from celery_plus import signals
from celery_plus.coordination import envelope
from celery_plus.coordination.coordinator import Coordinator, coordinator_for
from celery_plus.coordination.keeper import CoordinationKeeper
from celery_plus.coordination.start_check import COORDINATED_SURE_UNTIL
from celery_plus.leases.tokens import LEASE_HEADER, delivery_tag
from celery_plus.model.store import JobClaim
from celery_plus.send.options import message_extensions
from celery_plus.transport.publishing import job_from_message

logger = logging.getLogger("celery_plus.coordination")

#: Shortest wait before a delivery is tried again while the coordination store is unreachable.
STORE_RETRY_S = 2.0


class Claimed:
    """A delivery's claim in the coordination store, ended once by the request."""

    def __init__(self, coordinator: Coordinator, job_id: str, token: int, task_name: str) -> None:
        self.coordinator = coordinator
        self.job_id = job_id
        self.token = token
        self.task_name = task_name
        #: The claim's delivery tag in the leases' ledger (``coordinator.holdings``): the
        #: lease watch finds the run's deadline by it (``runtime/worker_state.running_tags``).
        self.tag = delivery_tag(job_id, token)
        #: Failure details noted by the request (exception type, message, traceback).
        self.failure: dict[str, Any] | None = None
        self._ended = False

    def started(self, at: float) -> None:
        """Its task started at ``at`` (a ``clock()`` time): the next heartbeat or the settle
        carries the start to the store."""
        self.coordinator.holdings.started(self.tag, at)

    def end(self, broker_action: str) -> None:
        """Settle as the broker action ``ack``, ``requeue`` or ``reject`` implies."""
        if self._ended:
            return
        self._ended = True
        action = broker_action
        if self.failure is not None and action in ("ack", "reject"):
            action = "fail"
        try:
            self.coordinator.settle(self.job_id, self.token, action, self.failure,
                                    self.task_name)
        except Exception as exc:
            # The broker ack goes on; the store's lease recovery decides about the record.
            logger.error("celery-plus: could not settle job %s in the coordination store: %r",
                         self.job_id, exc)


def _jittered(seconds: float) -> float:
    return seconds * (1.0 + random.random() * 0.5)


class Admission:
    """Decides what happens to one delivery of a task with extension options."""

    def __init__(self, coordinator: Coordinator) -> None:
        self.coordinator = coordinator
        self._adopted: set[str] = set()

    def admit(self, request: Any) -> bool:
        """True when the delivery may run (its claim is on ``request.plus_claim``)."""
        try:
            got = self.coordinator.claim(request.id)
            if got.outcome == "missing":
                got = self._adopt(request)
        except Exception as exc:
            # Store unreachable: neither run unchecked nor drop it; the broker keeps it.
            logger.warning("celery-plus: coordination store unavailable for %s[%s] (%r): "
                           "delivery given back", request.name, request.id, exc)
            self._give_back(request, _jittered(max(
                self.coordinator.config.coordination_retry_delay, STORE_RETRY_S)))
            return False
        if got.outcome == "claimed":
            request.plus_claim = Claimed(self.coordinator, request.id, got.token, request.name)
            # The task's own process needs the token for a continuation (retry, replace).
            request._request_dict[LEASE_HEADER] = got.token
            # ... and until when the claim is certainly its own: a task that starts later
            # asks the store first, and does not start if it cannot (``start_check.py``).
            sure_until = self.coordinator.holdings.sure_until(delivery_tag(request.id, got.token))
            request._request_dict[COORDINATED_SURE_UNTIL] = (
                float("-inf") if sure_until is None else sure_until)
            return True
        if got.outcome == "blocked":
            signals.task_concurrency_blocked.send(sender=request.name, task_id=request.id)
            self._give_back(request, _jittered(self.coordinator.config.coordination_retry_delay))
        elif got.outcome == "held":
            wait = max(got.lease_left_ms / 1000.0, self.coordinator.config.coordination_retry_delay)
            self._give_back(request, _jittered(wait))
        else:
            logger.info("celery-plus: %s[%s] is %s in the coordination store: stale delivery "
                        "acknowledged without running it", request.name, request.id, got.state)
            task_ready(request)
            request.acknowledge()
        return False

    def _give_back(self, request: Any, delay: float) -> None:
        """Publish the delivery again with an ETA ``delay`` seconds away, then ack it."""
        message = request.message
        eta = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=delay)
        info = message.delivery_info or {}
        try:
            envelope.publish(self.coordinator.app, envelope.from_delivery(message),
                             "" if info.get("exchange") else str(info.get("routing_key") or ""),
                             headers={"eta": eta.isoformat()})
        except Exception as exc:
            logger.warning("celery-plus: could not put %s back on the broker (%r); requeued",
                           request.id, exc)
            task_ready(request)
            request.reject(requeue=True)
            return
        task_ready(request)
        request.acknowledge()

    def _adopt(self, request: Any) -> JobClaim:
        """Record a job no coordinated client recorded (no unique key), then claim it."""
        if request.name not in self._adopted:
            self._adopted.add(request.name)
            logger.warning(
                "celery-plus: %s[%s] has no record in the coordination store: its sender has "
                "no plus_coordination_url. Recorded now; concurrency limits and dead letters "
                "apply, uniqueness (decided when a job is sent) does not.",
                request.name, request.id)
        env = envelope.from_delivery(request.message)
        header = dict(env["headers"].get("plus") or self._header(request))
        header.pop("u", None)
        env["headers"]["plus"] = header
        info = env["properties"]["delivery_info"]
        self.coordinator.publish(job_from_message(
            info.get("routing_key") or "", env, self.coordinator.config.max_deliveries))
        return self.coordinator.claim(request.id)

    @staticmethod
    def _header(request: Any) -> dict[str, Any]:
        task = request.task
        try:
            payload = task.plus_binder.bind(request.args, request.kwargs)
        except TypeError:
            payload = {}
        return message_extensions(task.plus_extensions, request.name, payload)


def _uses_extensions(request: Any) -> bool:
    return getattr(request.task, "plus_extensions", None) is not None


def _on_revoked(sender: Any = None, request: Any = None, **kwargs: Any) -> None:
    """A revoked or expired delivery never runs: cancel its waiting job (frees its hold)."""
    if sender is None or getattr(sender, "plus_extensions", None) is None or request is None:
        return
    coordinator = coordinator_for(sender.app)
    if coordinator is not None:
        coordinator.withdraw(request.id)


class Gate(bootsteps.StartStopStep):
    """Consumer bootstep of coordinated mode (does nothing in the other modes)."""

    label = "celery-plus coordination"

    def __init__(self, c: Any, **kwargs: Any) -> None:
        super().__init__(c, **kwargs)
        self.coordinator = coordinator_for(c.app)
        self.keeper: CoordinationKeeper | None = None
        if self.coordinator is None:
            return
        admission = Admission(self.coordinator)
        handle = c.on_task_request

        def on_task_request(request: Any) -> Any:
            if not _uses_extensions(request):
                return handle(request)
            if request.revoked() or not admission.admit(request):
                return None
            try:
                return handle(request)
            except BaseException:
                # It never reached the pool: give the claim back (not counted as a delivery).
                claim = request.plus_claim
                if claim is not None:
                    claim.end("release")
                raise

        c.on_task_request = on_task_request

    def start(self, c: Any) -> None:
        if self.coordinator is None or self.keeper is not None:
            return
        task_revoked.connect(_on_revoked, weak=False, dispatch_uid="celery_plus.revoked")
        logger.info("celery-plus: extensions enforced through the coordination store %s",
                    maybe_sanitize_url(self.coordinator.url))
        self.keeper = CoordinationKeeper(self.coordinator)
        self.keeper.start()

    def stop(self, c: Any) -> None:
        if self.keeper is not None:
            self.keeper.stop()
            self.keeper = None

    def shutdown(self, c: Any) -> None:
        self.stop(c)
