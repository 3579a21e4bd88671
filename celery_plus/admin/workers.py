"""The workers an operator sees on the dashboard, their health, and the two things it may ask
of one.

The list comes from the store, with no broadcast and no wait:

* **the workers' own records** (:meth:`~celery_plus.admin.api.Admin.worker_records`): every
  Celery worker writes its record — Celery node name (``celery@host``, the name remote
  control addresses), host, pid, the queues it consumes, its heartbeat interval — every
  heartbeat interval from its lease keeper; the store stamps the first and the last beat;
* **the leases** (:meth:`~celery_plus.admin.api.Admin.worker_leases`): the running jobs each
  worker holds (by the worker id its claims carry, ``host:pid:nonce``: matched to a record
  by host and pid) and its newest lease deadline.

**Health**, from the last beat and the worker's own interval
(:func:`~celery_plus.model.store.worker_health`): ``alive`` (a beat within two intervals and a
second), ``late`` (within six: a stalled or busy process), ``gone`` (no beat since: stopped,
killed or cut off; its record is dropped after a day), ``unknown`` (no record: a worker of an
earlier release, seen by its leases only).

**Remote control only on demand, once**: :func:`ask` sends one ``active_queues`` broadcast
and marks the workers that answered (with the queues they consume now). The actions go to
one node by name: **stop taking work** (``cancel_consumer`` for each queue it consumes: it
finishes what it holds and takes nothing new) and **shutdown** (Celery's warm shutdown:
running tasks finish first; what it prefetched goes back to the store).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from celery_plus.admin.api import Admin, connect
from celery_plus.model.store import worker_health

logger = logging.getLogger("celery_plus.admin")

#: How long the dashboard waits for workers to answer a remote-control broadcast (seconds).
REPLY_TIMEOUT = 1.0
#: Health values.
HEALTH = ("alive", "late", "gone", "unknown")


@dataclass
class WorkerView:
    """One worker as the dashboard shows it."""

    #: Celery node name (``celery@host``); '' for a worker with no record.
    node: str = ""
    host: str = ""
    pid: int | None = None
    #: Running jobs it holds in the store.
    jobs: int = 0
    #: Newest lease deadline of those jobs (ms; None: holds none).
    lease_deadline_ms: int | None = None
    #: Its last beat (store ms): its record's, else the newest lease deadline less the
    #: lease length; None: not known.
    last_heartbeat_ms: int | None = None
    #: Its first beat as this process (store ms; None: no record).
    started_ms: int | None = None
    #: Its heartbeat interval (ms; 0: no record).
    interval_ms: int = 0
    #: Queues it consumes (its record's, or its answer's when asked); None: not known.
    queues: list[str] | None = None
    worker_ids: list[str] = field(default_factory=list)
    health: str = "unknown"
    #: Whether it answered remote control (None: not asked).
    answered: bool | None = None

    def lease_expired(self, now_ms: int) -> bool:
        return self.lease_deadline_ms is not None and self.lease_deadline_ms < now_ms

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "host": self.host, "pid": self.pid, "jobs": self.jobs,
                "lease_deadline_ms": self.lease_deadline_ms,
                "last_heartbeat_ms": self.last_heartbeat_ms, "started_ms": self.started_ms,
                "interval_ms": self.interval_ms, "queues": self.queues,
                "worker_ids": self.worker_ids, "health": self.health,
                "answered": self.answered}


def node_host(node: str) -> str:
    return node.partition("@")[2]


def workers(admin: Admin, now_ms: int | None = None) -> list[WorkerView]:
    """Every worker the store knows: its record, and the leases of its running jobs."""
    now = admin.store.now_ms() if now_ms is None else now_ms
    views = [WorkerView(node=r.node, host=r.host, pid=r.pid or None, last_heartbeat_ms=r.at_ms,
                        started_ms=r.started_ms, interval_ms=r.interval_ms,
                        queues=list(r.queues), health=worker_health(r.at_ms, r.interval_ms, now))
             for r in admin.worker_records()]
    lease_ms = admin.lease_ms
    for lease in admin.worker_leases():
        view = _match(views, lease.host, lease.pid)
        if view is None:
            view = WorkerView(host=lease.host, pid=lease.pid)
            views.append(view)
        view.worker_ids.append(lease.worker_id)
        view.jobs += lease.jobs
        view.lease_deadline_ms = max(view.lease_deadline_ms or 0, lease.lease_deadline_ms)
        if not view.interval_ms:  # no record: the heartbeat its leases tell
            view.last_heartbeat_ms = (view.lease_deadline_ms - lease_ms if lease_ms
                                      else None)
    return views


def _match(views: list[WorkerView], host: str, pid: int | None) -> WorkerView | None:
    """The view of a store worker id: same pid, and same host when the view has one (the
    newest record when a pid was reused)."""
    same = [v for v in views if v.pid is not None and v.pid == pid and v.host in (host, "")]
    return max(same, key=lambda v: v.last_heartbeat_ms or 0) if same else None


def ask(admin: Admin, views: list[WorkerView], timeout: float = REPLY_TIMEOUT
        ) -> list[WorkerView]:
    """One remote-control broadcast (``active_queues``): each view is marked answered or
    not, with the queues it consumes now; a node that answered with no record is added."""
    if admin.app is None:
        return views
    try:
        replies = dict(admin.app.control.inspect(timeout=timeout).active_queues() or {})
    except Exception as exc:  # a broker hiccup: the store's view stands
        logger.warning("celery-plus admin: asking the workers failed: %r", exc)
        replies = {}
    by_node = {v.node: v for v in views if v.node}
    for node, reply in sorted(replies.items()):
        view = by_node.get(node)
        if view is None:
            view = WorkerView(node=node, host=node_host(node))
            views.append(view)
            by_node[node] = view
        view.queues = [str(q.get("name", "")) for q in reply or [] if isinstance(q, dict)]
    for view in views:
        view.answered = view.node in replies
    return views


def find(admin: Admin, node: str) -> WorkerView | None:
    """The worker named ``node`` (its store record; no broadcast)."""
    return next((v for v in workers(admin) if v.node == node), None)


def stop_taking_work(admin: Admin, view: WorkerView) -> list[str]:
    """Ask the worker to stop consuming every queue it consumes; the queues asked."""
    queues = view.queues or []
    for queue in queues:
        admin.app.control.cancel_consumer(queue, destination=[view.node], reply=True,
                                          timeout=REPLY_TIMEOUT)
    return queues


def shutdown(admin: Admin, view: WorkerView) -> None:
    """Ask the worker for Celery's warm shutdown."""
    admin.app.control.shutdown(destination=[view.node])


def list_workers(app: Any, ask_them: bool = False) -> list[WorkerView]:
    """``admin.list_workers(app)``: every worker by node name with its health, from the
    store (one call, no broadcast); ``ask_them=True`` adds one remote-control broadcast
    (:func:`ask`)."""
    with connect(app) as admin:
        views = workers(admin)
        return ask(admin, views) if ask_them else views
