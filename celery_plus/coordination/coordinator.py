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

from .. import signals
from ..transport.backend import Backend, JobClaim, NewJob, PublishOutcome, Settle

logger = logging.getLogger("celery_plus.coordination")

DURABLE, COORDINATED, PLAIN = "durable", "coordinated", "plain"

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
    would run without uniqueness, concurrency limits or dead letters, silently.
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
        coordinator._lock = threading.Lock()
        coordinator._held = {}


class Coordinator:
    """One app's coordination store: the store operations the send path and workers use.

    The backend is opened on first use with the app's ``plus_*`` settings (lease, backstop,
    retention, key prefix or PostgreSQL schema). Claims this process holds are tracked here so
    the lease keeper renews them.
    """

    def __init__(self, app: Any) -> None:
        self.app = app
        self.config = app.plus_config()
        self.url: str = self.config.coordination_url or ""
        self.worker_id = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._backend: Backend | None = None
        self._lock = threading.Lock()
        self._held: dict[str, int] = {}
        # A pool child forked while the keeper thread held the lock must not inherit it
        # locked; the parent's claims are not the child's to renew.
        ref = weakref.ref(self)
        os.register_at_fork(after_in_child=lambda: _reset_after_fork(ref))

    @property
    def backend(self) -> Backend:
        backend = self._backend
        if backend is None:
            with self._lock:
                if self._backend is None:
                    from ..transport import make_backend

                    self._backend = make_backend(self.url, self.config)
                backend = self._backend
        return backend

    def open_backend(self) -> Backend:
        """A new backend on the store (for a caller that closes it, e.g. the admin)."""
        from ..transport import make_backend

        return make_backend(self.url, self.config)

    def close(self) -> None:
        with self._lock:
            backend, self._backend = self._backend, None
        if backend is not None:
            backend.close()

    # -- publishing --------------------------------------------------------------------
    def publish(self, job: NewJob) -> PublishOutcome:
        """Record a message's job (uniqueness decided atomically) before the broker gets it."""
        return self.backend.publish(job)

    def withdraw(self, job_id: str) -> None:
        """Cancel a job whose message never reached the broker (its hold is released)."""
        from ..admin.api import admin_store_for

        try:
            admin_store_for(self.backend).cancel(job_id)
        except Exception as exc:  # the broker failure is the error the caller sees
            logger.warning("celery-plus: could not withdraw job %s: %r", job_id, exc)

    # -- claims ------------------------------------------------------------------------
    def claim(self, job_id: str) -> JobClaim:
        """Claim the job by id; a claimed job's lease is renewed from now on."""
        got = self.backend.claim_job(job_id, self.worker_id)
        if got.outcome == "claimed":
            with self._lock:
                self._held[job_id] = got.token
        return got

    def settle(self, job_id: str, token: int, action: str,
               detail: dict[str, Any] | None = None, task_name: str | None = None) -> None:
        """End a claim (``ack``, ``fail``, ``reject``, ``requeue``), fenced by its token."""
        with self._lock:
            if self._held.get(job_id) == token:
                del self._held[job_id]
        self.report_dead_letters(self.backend.settle([Settle(job_id, token, action, detail)]),
                                 task_name)

    def held(self) -> list[tuple[str, int]]:
        with self._lock:
            return list(self._held.items())

    def forget(self, job_ids: list[str]) -> None:
        """Stop renewing claims this process lost."""
        with self._lock:
            for job_id in job_ids:
                self._held.pop(job_id, None)

    def report_dead_letters(self, dead: list[tuple[str, str]],
                            task_name: str | None = None) -> None:
        for job_id, reason in dead:
            logger.error("celery-plus: job %s dead-lettered in the coordination store (%s)",
                         job_id, reason)
            signals.task_dead_lettered.send(sender=task_name, task_id=job_id, reason=reason)


__all__ = ["COORDINATED", "DURABLE", "PLAIN", "Coordinator", "check_worker", "coordinator_for",
           "mode", "tasks_with_extensions"]
