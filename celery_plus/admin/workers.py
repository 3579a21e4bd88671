"""The workers an operator sees on the dashboard, and the two things it may ask of one.

The list joins two sources:

* **the store** (:meth:`~celery_plus.admin.api.Admin.worker_leases`): every worker holding
  running jobs, by the worker id its claims carry (``host:pid:nonce``), with the number of
  jobs it holds and its newest lease deadline. A heartbeat (or a claim) pushes the deadline
  to ``now + plus_visibility_timeout``, so the last heartbeat is the deadline less the lease
  length; a deadline in the past means the worker stopped renewing (its jobs are recovered
  by the next maintenance pass);
* **Celery's remote control** (``inspect stats`` and ``active_queues``, one short broadcast
  each): the node name of every worker that answers (the name control commands are sent to),
  its pid and the queues it consumes, idle workers included.

A store worker and a node are the same process when host and pid agree. The actions go
through Celery's remote control, addressed to one node: **stop taking work**
(``cancel_consumer`` for each queue it consumes: it finishes what it holds and takes nothing
new) and **shutdown** (Celery's warm shutdown: running tasks finish first; what it prefetched
goes back to the store).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from celery_plus.admin.api import Admin

#: How long the dashboard waits for workers to answer a remote-control broadcast (seconds).
REPLY_TIMEOUT = 1.0


@dataclass
class WorkerView:
    """One worker as the dashboard shows it."""

    #: Celery node name (``celery@host``); '' for a worker that did not answer.
    node: str = ""
    host: str = ""
    pid: int | None = None
    #: Running jobs it holds in the store.
    jobs: int = 0
    #: Newest lease deadline of those jobs, and so its last heartbeat (ms; None: holds none).
    lease_deadline_ms: int | None = None
    last_heartbeat_ms: int | None = None
    #: Queues it consumes (remote control); None: it did not answer.
    queues: list[str] | None = None
    worker_ids: list[str] = field(default_factory=list)

    @property
    def answered(self) -> bool:
        return bool(self.node)

    def lease_expired(self, now_ms: int) -> bool:
        return self.lease_deadline_ms is not None and self.lease_deadline_ms < now_ms

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "host": self.host, "pid": self.pid, "jobs": self.jobs,
                "lease_deadline_ms": self.lease_deadline_ms,
                "last_heartbeat_ms": self.last_heartbeat_ms, "queues": self.queues,
                "worker_ids": self.worker_ids}


def _broadcast(app: Any, command: str, timeout: float) -> dict[str, Any]:
    """Replies to one remote-control ``inspect`` command: node name -> reply."""
    try:
        replies = getattr(app.control.inspect(timeout=timeout), command)()
    except Exception:  # a broker hiccup: the list falls back to the store's view
        return {}
    return dict(replies or {})


def node_host(node: str) -> str:
    return node.partition("@")[2]


def workers(admin: Admin, timeout: float = REPLY_TIMEOUT) -> list[WorkerView]:
    """Every worker the store or remote control knows (see the module docstring)."""
    stats: dict[str, Any] = {}
    queues: dict[str, Any] = {}
    if admin.app is not None:
        # The two broadcasts at once: the page waits for one timeout, not two.
        threads = [threading.Thread(target=lambda: stats.update(
                       _broadcast(admin.app, "stats", timeout)), daemon=True),
                   threading.Thread(target=lambda: queues.update(
                       _broadcast(admin.app, "active_queues", timeout)), daemon=True)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout + 5)
    views: list[WorkerView] = []
    for node in sorted(set(stats) | set(queues)):
        pid = (stats.get(node) or {}).get("pid")
        names = [str(q.get("name", "")) for q in queues.get(node) or [] if isinstance(q, dict)]
        views.append(WorkerView(node=node, host=node_host(node),
                                pid=pid if isinstance(pid, int) else None,
                                queues=names if node in queues else None))
    lease_ms = admin.lease_ms
    for lease in admin.worker_leases():
        view = _match(views, lease.host, lease.pid)
        if view is None:
            view = WorkerView(host=lease.host, pid=lease.pid)
            views.append(view)
        view.worker_ids.append(lease.worker_id)
        view.jobs += lease.jobs
        deadline = max(view.lease_deadline_ms or 0, lease.lease_deadline_ms)
        view.lease_deadline_ms = deadline
        view.last_heartbeat_ms = deadline - lease_ms if lease_ms else None
    return views


def _match(views: list[WorkerView], host: str, pid: int | None) -> WorkerView | None:
    """The node of a store worker: same pid, and same host when the node name has one."""
    same_pid = [v for v in views if v.pid is not None and v.pid == pid]
    exact = [v for v in same_pid if v.host == host]
    if exact:
        return exact[0]
    unnamed = [v for v in same_pid if not v.host]
    return unnamed[0] if len(unnamed) == 1 else None


def find(admin: Admin, node: str) -> WorkerView | None:
    """The worker named ``node`` if it answers remote control now."""
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
