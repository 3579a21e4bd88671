"""What the transport asks of the Celery worker in its process (nothing outside a worker).

kombu knows deliveries, not tasks; three decisions of the transport depend on the worker:
stop waiting once it is shutting down; stop a task still running here whose lease another
worker took over (:func:`stop_stale_runs`); and what to do with the unsettled deliveries of
a connection that closes. In a worker that goes on (Celery reconnecting after a connection
error), they stay claimed: the tasks already handed to the pool still run and ack, and
what Celery drops instead is given back once nothing references its message any more
(``Holdings.keep``). Anywhere else (a worker shutting down, a plain kombu consumer), they go
back to their queue at once.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Collection
from typing import Any

from billiard.common import TERM_SIGNAL

from celery_plus.runtime import deadline_guard, process_tree
from celery_plus.runtime.helper_threads import green_patched

logger = logging.getLogger("celery_plus.transport")

_in_worker = False


#: ``celery.worker.state``, imported on first use (a consumer asks once per job delivered).
_celery_state: Any = None


def worker_stopping() -> bool:
    """True once a Celery worker in this process was asked to shut down."""
    global _celery_state
    if _celery_state is None:
        from celery.worker import state

        _celery_state = state
    # Celery stores the exit code there: 0 (EX_OK) means "stop" too.
    stop, terminate = _celery_state.should_stop, _celery_state.should_terminate
    return (stop is not None and stop is not False) or (
        terminate is not None and terminate is not False)


def worker_running() -> bool:
    """True in a Celery worker's main process that is not shutting down."""
    return _in_worker and not worker_stopping()


#: The Celery worker (``WorkController``) started in this process.
_controller: Any = None


def worker_started(**kwargs: Any) -> None:
    global _in_worker, _controller
    _in_worker = True
    _controller = kwargs.get("sender")


def worker_node() -> tuple[str, tuple[str, ...]] | None:
    """The Celery node name (``celery@host``) of the worker running in this process and the
    queues it consumes now (after a ``cancel_consumer``, without that queue); None: no
    worker started here."""
    hostname = getattr(_controller, "hostname", None)
    if not _in_worker or not isinstance(hostname, str) or not hostname:
        return None
    try:  # the consumer's queues now (Celery's Tasks bootstep), else as configured
        consumer = getattr(getattr(_controller, "consumer", None), "task_consumer", None)
        if consumer is not None:
            names = [str(q.name) for q in list(consumer.queues)]
        else:
            names = [str(q) for q in _controller.app.amqp.queues.consume_from]
    except Exception:
        names = []
    return hostname, tuple(sorted(names))


def stop_stale_runs(tags: Collection[str]) -> None:
    """Stop the tasks this worker still runs for deliveries whose leases were lost.

    A worker frozen past its lease (``SIGSTOP``, a VM pause) goes on running, once it
    thaws, a task another worker now runs under a live claim: two runs of one job at once,
    and a concurrency limit exceeded. A task in a prefork pool process is stopped the way
    ``revoke(terminate=True)`` stops one (SIGTERM to its process; Celery replaces the
    process, and the requeue of the lost delivery is a fenced no-op), and the processes the
    task started are killed with it (``process_tree``). Tasks of the solo,
    threads and green pools cannot be stopped from outside: they are logged. (A green pool's
    ``worker_pid`` is not a process id but the id of the task's greenlet: never a pid to
    signal.)
    """
    if not tags or not _in_worker:
        return
    for tag, request in running_tags().items():
        if tag not in tags:
            continue
        pid = pool_process(request)
        if pid is not None:
            logger.warning("celery-plus: stopping task %s[%s] in pool process %s: its lease "
                           "was lost (another worker runs the job now)",
                           request.name, request.id, pid)
            # billiard's terminate signal (REMAP_SIGTERM: SIGQUIT, say)
            _log_killed(f"pool process {pid}", process_tree.stop_tree(pid, TERM_SIGNAL))
        else:
            logger.warning("celery-plus: task %s[%s] goes on running here although its "
                           "lease was lost (another worker runs the job now): tasks of this "
                           "pool cannot be stopped from outside", request.name, request.id)


#: The exit code of a worker that stopped itself because a run outlived its lease
#: (``EX_TEMPFAIL``: its supervisor restarts it).
EX_LEASE_OVERRUN = 75


def running_tags() -> dict[str, Any]:
    """Delivery tag -> request of every task started here and not yet acknowledged. A
    delivery of another broker claimed in the coordination store goes by its claim's tag
    (``"<token>:<job id>"``, the ``tag`` of the request's ``plus_claim``): the lease watch
    finds its deadline under that tag, as for a delivery of the ``plus`` transport."""
    running: dict[str, Any] = {}
    for request in _active_requests():
        tag = getattr(getattr(request, "plus_claim", None), "tag", None)
        if tag is None:
            tag = getattr(getattr(request, "message", None), "delivery_tag", None)
        if isinstance(tag, str) and request.time_start and not request.acknowledged:
            running[tag] = request
    return running


def pool_process(request: Any) -> int | None:
    """The pid of the prefork pool process running ``request`` (None: it runs in this
    process — solo, threads — or in a greenlet, whose ``worker_pid`` is no process id)."""
    pid = request.worker_pid
    if pid and pid != os.getpid() and not green_patched():
        return int(pid)
    return None


def stop_overdue_runs(overdue: dict[str, float], running: dict[str, Any], lease_s: float,
                      stopped: set[str], pool_processes: bool = True) -> None:
    """Stop the ``running`` runs (:func:`running_tags`) of ``overdue`` deliveries (tag ->
    seconds since the store last confirmed their leases) before their leases lapse: a
    prefork pool process is killed (``SIGKILL``: a task in C code runs no signal handler;
    Celery reports the worker lost and the delivery goes back, a delivery counted); any other
    pool cannot stop one task, so this process exits (:data:`EX_LEASE_OVERRUN`; its
    supervisor restarts it). Either way the processes the runs started die first
    (``process_tree``: a task's ``subprocess`` would run on, handed to init). ``stopped``:
    tags already stopped (each is killed once); ``pool_processes``: False leaves prefork runs
    alone for now (just after a freeze of this process, while the keeper asks the store)."""
    for tag, request in running.items():
        if tag not in overdue or tag in stopped:
            continue
        pid = pool_process(request)
        unconfirmed = overdue[tag]
        if pid is not None:
            if not pool_processes:
                continue
            stopped.add(tag)
            logger.warning("celery-plus: stopping task %s[%s] in pool process %s: its lease "
                           "could not be renewed for %.1f s of its %.0f s (the store is "
                           "unreachable or refused); killed before the lease lapses and "
                           "another worker takes the job over (the job goes back, a delivery "
                           "counted)", request.name, request.id, pid, unconfirmed, lease_s)
            _log_killed(f"pool process {pid}", process_tree.stop_tree(pid))
            continue
        logger.critical("celery-plus: task %s[%s]'s lease could not be renewed for %.1f s of "
                        "its %.0f s (the store is unreachable or refused); the tasks of this "
                        "pool cannot be stopped one by one, so this worker exits now (code "
                        "%d) before the lease lapses and another worker takes the job over; "
                        "its supervisor restarts it", request.name, request.id, unconfirmed,
                        lease_s, EX_LEASE_OVERRUN)
        _log_killed("this worker's process",
                    process_tree.kill_own_descendants(spare=deadline_guard.guard_pids()))
        for handler in logging.getLogger().handlers:
            with contextlib.suppress(Exception):
                handler.flush()
        os._exit(EX_LEASE_OVERRUN)


def _log_killed(stopped: str, pids: list[int]) -> None:
    """Name the processes killed below a ``stopped`` process (its tasks' own: a
    ``subprocess`` a task started; at a worker's exit, its guard process too)."""
    if pids:
        logger.warning("celery-plus: killed %d process(es) started below %s with it: %s",
                       len(pids), stopped, " ".join(map(str, pids)))


def _active_requests() -> list[Any]:
    """A copy of Celery's set of executing requests (other threads change it meanwhile).

    Celery keeps them in a ``WeakSet``, whose Python-level iteration fails when the set
    changes size meanwhile; its ``data`` (a set of weak references) is copied in one call
    under the GIL, so the copy never fails, and never comes back empty by mistake (an empty
    scan would tell the lease watch that no run goes on)."""
    from celery.worker import state

    refs = state.active_requests.data.copy()
    return [request for ref in refs if (request := ref()) is not None]

