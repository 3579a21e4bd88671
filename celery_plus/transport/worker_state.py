"""What the transport asks of the Celery worker in its process (nothing outside a worker).

kombu knows deliveries, not tasks; two decisions of the transport depend on the worker: stop
waiting once it is shutting down, and, when a connection closes while the worker goes on
(Celery reconnecting after a connection error), which deliveries are tasks still executing —
those keep their claims, since Celery will ack them once they finish.
"""

from __future__ import annotations


def worker_stopping() -> bool:
    """True once a Celery worker in this process was asked to shut down."""
    from celery.worker import state

    # Celery stores the exit code there: 0 (EX_OK) means "stop" too.
    flags = (state.should_stop, state.should_terminate)
    return any(flag is not None and flag is not False for flag in flags)


def executing_deliveries() -> set[str]:
    """Delivery tags of the tasks this worker is executing and will settle itself.

    Empty when the worker is stopping (what is still unsettled then is given back), and for
    tasks Celery cancels on a connection loss
    (``worker_cancel_long_running_tasks_on_connection_loss``): they will never be settled.
    """
    from celery.worker import state

    if worker_stopping():
        return set()
    tags: set[str] = set()
    for request in list(state.active_requests):
        task = getattr(request, "task", None)
        conf = getattr(getattr(task, "app", None), "conf", None)
        if conf is not None and conf.get("worker_cancel_long_running_tasks_on_connection_loss"):
            continue
        tag = getattr(getattr(request, "message", None), "delivery_tag", None)
        if isinstance(tag, str):
            tags.add(tag)
    return tags
