"""What the transport asks of the Celery worker in its process (nothing outside a worker).

kombu knows deliveries, not tasks; two decisions of the transport depend on the worker: stop
waiting once it is shutting down, and what to do with the unsettled deliveries of a
connection that closes. In a worker that goes on (Celery reconnecting after a connection
error), they stay claimed: the tasks already handed to the pool still run and ack, and
what Celery drops instead is given back once nothing references its message any more
(``Holdings.keep``). Anywhere else (a worker shutting down, a plain kombu consumer), they go
back to their queue at once.
"""

from __future__ import annotations

from typing import Any

from celery import signals

_in_worker = False


def worker_stopping() -> bool:
    """True once a Celery worker in this process was asked to shut down."""
    from celery.worker import state

    # Celery stores the exit code there: 0 (EX_OK) means "stop" too.
    flags = (state.should_stop, state.should_terminate)
    return any(flag is not None and flag is not False for flag in flags)


def worker_running() -> bool:
    """True in a Celery worker's main process that is not shutting down."""
    return _in_worker and not worker_stopping()


@signals.worker_init.connect(weak=False)
def _worker_started(**kwargs: Any) -> None:
    global _in_worker
    _in_worker = True
