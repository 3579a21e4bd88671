"""Which mode an app is in, and the per-app handle on its coordination store.

An app is in one of three modes (:func:`mode`): ``durable`` (its broker is ``plus+...``: the
durable transport enforces every extension itself), ``coordinated`` (another broker, and
``plus_coordination_url`` names a store), or ``plain`` (another broker and no store: extension
options have no effect). :func:`check_worker` turns the two misconfigurations into start-up
errors; :func:`coordinator_for` gives the app's :class:`Coordinator` in coordinated mode.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
import weakref
from typing import Any

from celery.exceptions import ImproperlyConfigured
from kombu.utils.url import maybe_sanitize_url

from celery_plus import signals
from celery_plus.leases.holdings import Holdings, holdings_for
from celery_plus.leases.keeper import clock
from celery_plus.leases.tokens import delivery_tag
from celery_plus.model.store import Backend, JobClaim, NewJob, PublishOutcome, Settle
from celery_plus.runtime.helper_threads import green_patched, native_ident, native_lock

logger = logging.getLogger("celery_plus.coordination")

DURABLE, COORDINATED, PLAIN = "durable", "coordinated", "plain"

#: Settle actions after which the broker forgets the delivery (acked, or dead): a record the
#: delivery's claim no longer covers must be finished by the store too, or nothing ever will.
FINAL_ACTIONS = ("ack", "fail", "reject")

_CREATE_LOCK = threading.Lock()


def _is_plus_broker(app: Any) -> bool:
    conn = app.connection_for_write()
    try:
        return bool(conn.transport_cls == "plus")
    finally:
        conn.release()


def mode(app: Any) -> str:
    """``durable``, ``coordinated`` or ``plain`` (see the module docstring).

    Raises ``ImproperlyConfigured`` for a ``plus+`` broker with ``plus_coordination_url`` set:
    the setting would silently do nothing.
    """
    url = app.plus_config().coordination_url
    if _is_plus_broker(app):
        if url:
            raise ImproperlyConfigured(
                f"Setting plus_coordination_url={maybe_sanitize_url(url)!r} is set, but "
                f"broker_url {app.connection_for_write().as_uri()!r} is a celery-plus durable "
                "store, which enforces uniqueness, concurrency and dead letters itself: a "
                "coordination store would be ignored. Fix: remove plus_coordination_url (it "
                "is for amqp:// and redis:// brokers).")
        return DURABLE
    return COORDINATED if url else PLAIN


def tasks_with_extensions(app: Any) -> list[str]:
    """Names of the app's tasks that declare extension options."""
    return sorted(name for name, task in app.tasks.items()
                  if getattr(task, "plus_extensions", None) is not None)


def check_worker(app: Any) -> str:
    """Validate the mode at worker start-up; returns it.

    A worker of a plain-mode app whose tasks declare extension options refuses to start: they
    would run without uniqueness, concurrency limits or dead letters, silently; so does one
    of a coordinated app whose tasks declare a cluster rate limit (only the durable transport
    enforces it).
    """
    current = mode(app)
    if current == PLAIN:
        declared = tasks_with_extensions(app)
        if declared:
            shown = ", ".join(declared[:5])
            if len(declared) > 5:
                shown += f" (and {len(declared) - 5} more)"
            raise ImproperlyConfigured(
                f"Tasks {shown} declare celery-plus extension options (unique, concurrency, "
                f"max_deliveries, ...), but broker_url {app.connection_for_write().as_uri()!r} "
                "is not a celery-plus durable store and plus_coordination_url is not set, so "
                "nothing would enforce them. Fix: set plus_coordination_url to a Redis or "
                "PostgreSQL URL (e.g. 'redis://localhost:6379/0'), or use a plus+... broker "
                "(see docs/coordination.md).")
    if current == COORDINATED:
        limited = sorted(name for name, task in app.tasks.items()
                         if getattr(getattr(task, "plus_extensions", None), "rate_limit",
                                    None) is not None)
        if limited:
            raise ImproperlyConfigured(
                f"Tasks {', '.join(limited[:5])} declare a cluster rate limit "
                "(rate_limit_scope='cluster' or rate_limit_key), which the durable transport "
                "decides when it claims a job; with a coordination store the broker delivers "
                "the jobs, so nothing would enforce it. Fix: use a plus+... broker, or drop "
                "rate_limit_scope/rate_limit_key to keep Celery's per-worker rate_limit "
                "(see docs/rate-limits.md).")
    return current


def coordinator_for(app: Any) -> Coordinator | None:
    """The app's :class:`Coordinator` (one per app), or None when not in coordinated mode."""
    cached = app.__dict__.get("_plus_coordinator", False)
    if cached is not False:
        return cached
    with _CREATE_LOCK:
        cached = app.__dict__.get("_plus_coordinator", False)
        if cached is False:
            cached = Coordinator(app) if mode(app) == COORDINATED else None
            app.__dict__["_plus_coordinator"] = cached
    return cached


def _reset_after_fork(ref: weakref.ref[Coordinator]) -> None:
    coordinator = ref()
    if coordinator is not None:
        coordinator._lock = native_lock()
        coordinator.holdings = Holdings(coordinator._lease_s)
        coordinator._unsettled = []


class Coordinator:
    """One app's coordination store: the store operations the send path and workers use.

    The backend is opened on first use with the app's ``plus_*`` settings (lease, backstop,
    retention, key prefix or PostgreSQL schema). Claims this process holds are kept in
    :attr:`holdings` (the leases' one ledger, ``leases/holdings.py``), which the lease keeper
    (``keeper.py``) renews and feeds the heartbeat's verdicts into.
    """

    def __init__(self, app: Any) -> None:
        self.app = app
        self.config = app.plus_config()
        self.url: str = self.config.coordination_url or ""
        self.worker_id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._backend: Backend | None = None
        #: Under gevent/eventlet, the OS thread whose backend is ``_backend``, and the
        #: backends of the others (the keeper is a real OS thread: a green socket or lock
        #: belongs to the thread whose hub made it, as for ``Transport.backend``).
        self._owner_thread: int | None = None
        self._thread_backends: dict[int, Backend] = {}
        #: Shared by greenlets and the keeper's OS thread: held around plain data only.
        self._lock = native_lock()
        self._lease_s = self.config.visibility_timeout
        #: The claims this process holds in the store, when each was last confirmed and
        #: whether the store said it is over; its settles are stored here at once
        #: (:meth:`settle`), never queued in it.
        #: Registered with the process's other holdings (``holdings_for``): the lease watch
        #: (``leases/deadline.py``) stops a run of these claims past its deadline as it
        #: stops one of the ``plus`` transport's, by the same rule.
        self.holdings = holdings_for(("coordination", self.worker_id), self._lease_s)
        #: Settles a store error kept from landing, retried by the keeper until they do.
        self._unsettled: list[tuple[str, int, str, dict[str, Any] | None, str | None]] = []
        # A pool child forked while the keeper thread held the lock must not inherit it
        # locked; the parent's claims are not the child's to renew.
        ref = weakref.ref(self)
        os.register_at_fork(after_in_child=lambda: _reset_after_fork(ref))

    @property
    def backend(self) -> Backend:
        """The store (opened on first use, not connected yet); under gevent/eventlet one
        per OS thread."""
        backend = self._backend
        if backend is None:
            with self._lock:
                if self._backend is None:
                    self._backend = self._open()
                    self._owner_thread = native_ident() if green_patched() else None
                backend = self._backend
        if self._owner_thread is None or native_ident() == self._owner_thread:
            return backend
        ident = native_ident()
        with self._lock:
            found = self._thread_backends.get(ident)
            if found is None:
                found = self._thread_backends[ident] = self._open()
        return found

    def _open(self) -> Backend:
        from celery_plus.stores.registry import open_store

        backend = open_store(self.url, self.config)
        # Its waiting records wait for another broker's message, which may be gone for
        # good: their holds lapse at the backstop, not renewed forever.
        backend.renews_waiting_holds = False  # type: ignore[attr-defined]
        return backend

    def open_backend(self) -> Backend:
        """A new backend on the store (for a caller that closes it, e.g. the admin)."""
        from celery_plus.stores.registry import open_store

        return open_store(self.url, self.config)

    def close(self) -> None:
        with self._lock:
            backends = [self._backend, *self._thread_backends.values()]
            self._backend, self._thread_backends = None, {}
        for backend in backends:
            if backend is not None:
                backend.close()

    # -- publishing --------------------------------------------------------------------
    def publish(self, job: NewJob) -> PublishOutcome:
        """Record a message's job (uniqueness decided atomically) before the broker gets it."""
        return self.backend.publish(job)

    def withdraw(self, job_id: str) -> None:
        """Cancel a job whose message never reached the broker (its hold is released)."""
        from celery_plus.stores.registry import admin_for

        try:
            admin_for(self.backend).cancel(job_id)
        except Exception as exc:  # the broker failure is the error the caller sees
            logger.warning("celery-plus: could not withdraw job %s: %r", job_id, exc)

    # -- claims ------------------------------------------------------------------------
    def claim(self, job_id: str) -> JobClaim:
        """Claim the job by id; a claimed job's lease is renewed from now on."""
        asked = clock()
        got = self.backend.claim_job(job_id, self.worker_id)
        if got.outcome == "claimed":
            self.holdings.hold(job_id, got.token, asked)
            # Claimed for a delivery about to run: its run is under the lease watch.
            self.holdings.delivered(delivery_tag(job_id, got.token))
        return got

    def settle(self, job_id: str, token: int, action: str,
               detail: dict[str, Any] | None = None, task_name: str | None = None) -> None:
        """End a claim (``ack``, ``fail``, ``reject``, ``requeue``), fenced by its token.

        A settle the store cannot take now is kept and retried by the keeper
        (:meth:`retry_unsettled`); the exception is raised for the caller to log. A claim
        that may have been lost — suspect: not held here any more, found over by a heartbeat,
        or not confirmed within the sure share of its lease (``holdings.SURE_SHARE``) — is
        checked afterwards: see :meth:`finish_orphan`.
        """
        tag = delivery_tag(job_id, token)
        held = self.holdings.get(tag)
        # How long its task ran (from Claimed.started): the store keeps its real start.
        run_ms = (None if held is None or held.started is None
                  else max(round((clock() - held.started) * 1000), 0))
        sure_until = self.holdings.forget(tag)
        suspect = sure_until is None or clock() >= sure_until
        try:
            dead = self.backend.settle([Settle(job_id, token, action, detail, run_ms=run_ms)])
        except Exception:
            with self._lock:
                self._unsettled.append((job_id, token, action, detail, task_name))
            raise
        self.report_dead_letters(dead, task_name)
        if suspect:
            self.finish_orphan(job_id, token, action, detail, task_name)

    def _orphaned(self, job_id: str, token: int) -> bool:
        """True if claim ``token`` of the job was recovered and nothing claimed it since.

        Recovery leaves the token as it was and records a ``lease expired`` attempt; a
        continuation (retry, replace: its message is on the broker) records ``retried``.

        This reads the job's record, not :attr:`holdings`: it is the settle path (a claim
        already let go of, whose settle may have been fenced), not the lease path — the
        ledger only says the claim was suspect, the record says whether it was recovered.
        """
        try:
            record = self.backend.record(job_id)
        except ValueError:  # a history that is not JSON
            return False
        if record is None or record.state not in ("enqueued", "blocked"):
            return False
        return (record.lease_token == token and bool(record.history)
                and record.history[-1].get("outcome") == "lease expired")

    def finish_orphan(self, job_id: str, token: int, action: str,
                      detail: dict[str, Any] | None, task_name: str | None) -> bool:
        """Finish the record of a delivery whose claim was recovered while it still ran.

        The broker forgets the delivery once it is acked (or dead), and the recovery put its
        record back to waiting: no message would ever claim it again, and it would hold its
        key. If nothing claimed it since, it is claimed now and settled as the delivery
        ended. A record another delivery runs, a continuation's, or a finished one is left
        alone. False while its group is full (the keeper tries again).

        The settle path, not the lease path: it goes by the record (:meth:`_orphaned`), and
        its claim is settled at once, never held in :attr:`holdings` nor renewed.
        """
        if action not in FINAL_ACTIONS or not self._orphaned(job_id, token):
            return True  # nothing to finish (a requeued delivery comes back from the broker)
        got = self.backend.claim_job(job_id, self.worker_id)
        if got.outcome == "blocked":
            return False
        if got.outcome == "claimed":
            logger.warning("celery-plus: job %s had lost its claim in the coordination store "
                           "while its delivery ran; its record is settled (%s) now",
                           job_id, action)
            self.report_dead_letters(
                self.backend.settle([Settle(job_id, got.token, action, detail)]), task_name)
        return True

    def retry_unsettled(self) -> None:
        """Send again the settles a store error kept back (the keeper calls this)."""
        with self._lock:
            pending, self._unsettled = self._unsettled, []
        for job_id, token, action, detail, task_name in pending:
            try:
                self.report_dead_letters(
                    self.backend.settle([Settle(job_id, token, action, detail)]), task_name)
                done = self.finish_orphan(job_id, token, action, detail, task_name)
            except Exception as exc:
                logger.warning("celery-plus: settle of job %s still failing: %r", job_id, exc)
                done = False
            if not done:
                with self._lock:
                    self._unsettled.append((job_id, token, action, detail, task_name))

    def report_dead_letters(self, dead: list[tuple[str, str]],
                            task_name: str | None = None) -> None:
        for job_id, reason in dead:
            logger.error("celery-plus: job %s dead-lettered in the coordination store (%s)",
                         job_id, reason)
            signals.task_dead_lettered.send(sender=task_name, task_id=job_id, reason=reason)


__all__ = ["COORDINATED", "DURABLE", "PLAIN", "Coordinator", "check_worker", "coordinator_for",
           "mode", "tasks_with_extensions"]
