"""Three guards on Celery's worker pools, for a worker consuming from the ``plus`` transport
(and the start of its lease watch, ``leases/deadline.py``, which stops runs whose leases could
not be renewed in time; a worker of another broker with a coordination store starts the watch
too, for its claims there).

On this transport a claim outlives its connection (``leases/holdings.py``): a delivery
Celery still holds keeps its claim, renewed, until Celery settles it, and a delivery Celery
drops gives its claim back to the store. Two quirks of Celery's pools turn that into a job run
twice or held for ever; :func:`install` guards every worker on the ``plus`` transport once it
is ready (Celery's ``worker_ready`` signal, before any task reaches the pool).

**A reconnect keeps the jobs a prefork pool handed to its processes** (:func:`keep_handed_jobs`).
On a broker connection error and on a warm shutdown, Celery's consumer flushes its prefork pool
(``AsynPool.flush``): every job a pool process has not *accepted* yet is discarded, "since the
broker redelivers it". The pool counts a job as accepted only once it has read the process's
acknowledgement, so a job already written to a process, which that process reads and runs, is
discarded too: its result is ignored and Celery drops its message, whose claim goes back to the
store, which delivers the job again (found with short jobs and Redis ``CLIENT KILL``, and with
``SIGTERM`` of busy workers). So the flush treats the jobs already handed to a process as
started: they stay in the pool and ack through their kept claims. Jobs still waiting in the
pool's own buffer are discarded as before: they never run, and their claims go back.

**A job a pool process started is never handed to another** (:func:`count_handed_jobs`).
When the prefork pool finds a process dead, it sends the jobs that process had not *accepted*
to another process ("job was not acked, so find another worker to send it to",
``AsynPool.on_partial_read``). A process acknowledges a job before it starts it, and billiard
reads the acknowledgements left by the processes it found exited before it looks at the jobs;
but a process that exits between those two steps (two pool processes dying at once, the window
wider on a loaded machine) leaves its acknowledgement unread: a job it had started, even one
that killed it, ran again in the replacement process under the same delivery, which the store
counts once, so ``max_deliveries`` did not bound its runs. The pool now reads the dead process's
acknowledgements first: a job the process accepted is reported as a lost worker (Celery rejects
the delivery; the store redelivers it, counted, or dead-letters it at its limit), and only a job
the process never read (killed while idle) goes to another process, as before.

**A task that raises SystemExit or KeyboardInterrupt is a lost worker, not a stuck one**
(:func:`report_base_exceptions`). The solo, threads and green pools run a task through Celery's
``apply_target``, which reports such an exception as a ``WorkerLostError`` given to the
*success* callback, and Celery's success handler cannot unpack it: the solo worker exited
("Unrecoverable error"), and a threads worker never settled the delivery, so its claim was
renewed for ever. The callback now gets Celery's failure triple, so the request is handled as
one whose worker was lost (as in the prefork pool): rejected and redelivered once, then
dead-lettered (``task_reject_on_worker_lost``).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from billiard.einfo import ExceptionInfo
from celery import signals

from celery_plus.leases import deadline

logger = logging.getLogger("celery_plus")


def keep_handed_jobs(pool: Any) -> None:
    """Make ``pool`` (Celery's started prefork ``TaskPool``) flush as the module says."""
    cache = getattr(getattr(pool, "_pool", None), "_cache", None)  # billiard's jobs by id
    flush: Callable[[], Any] | None = getattr(pool, "flush", None)
    if flush is None or getattr(flush, "keeps_handed_jobs", False) \
            or not isinstance(cache, dict):
        return

    def flush_keeping_handed_jobs() -> None:
        handed = [job for job in list(cache.values())
                  if not getattr(job, "_accepted", True)
                  and getattr(job, "_write_to", None) is not None]
        for job in handed:
            job._accepted = True  # Celery's flush keeps what a process accepted
        try:
            flush()
        finally:
            for job in handed:
                if job._worker_pid is None:  # the process's acknowledgement is still to come
                    job._accepted = False

    flush_keeping_handed_jobs.keeps_handed_jobs = True  # type: ignore[attr-defined]
    pool.flush = flush_keeping_handed_jobs


def count_handed_jobs(pool: Any) -> None:
    """Make ``pool`` (Celery's started prefork ``TaskPool``) read what a dead process said
    before it decides to send that process's job to another (module docstring)."""
    asyn: Any = getattr(pool, "_pool", None)  # billiard's AsynPool
    on_partial_read: Callable[[Any, Any], Any] | None = getattr(asyn, "on_partial_read", None)
    if on_partial_read is None or getattr(on_partial_read, "counts_handed_jobs", False):
        return

    def on_partial_read_reading_acks(job: Any, proc: Any) -> Any:
        if not getattr(job, "_accepted", True):
            # The process wrote its acknowledgement before it started the job: read it now
            # (it accepts the job, which the pool then reports lost with its process).
            asyn.process_flush_queues(proc)
            if job._accepted:
                logger.warning("celery-plus: pool process %s died running job %s before the "
                               "pool read its acknowledgement: reported as a lost worker, "
                               "not sent to another process", getattr(proc, "pid", "?"),
                               getattr(job, "_job", "?"))
        return on_partial_read(job, proc)

    on_partial_read_reading_acks.counts_handed_jobs = True  # type: ignore[attr-defined]
    asyn.on_partial_read = on_partial_read_reading_acks


def report_base_exceptions(pool: Any) -> None:
    """Make ``pool`` (a solo, threads or green ``TaskPool``) hand its success callback
    Celery's ``(failed, ExceptionInfo, runtime)`` triple where ``apply_target`` gives it a
    bare ``ExceptionInfo``."""
    on_apply = pool.on_apply
    if getattr(on_apply, "reports_base_exceptions", False):
        return

    @functools.wraps(on_apply)
    def apply(*args: Any, callback: Callable[[Any], Any] | None = None, **options: Any) -> Any:
        if callback is not None:
            callback = functools.partial(_as_triple, callback)
        return on_apply(*args, callback=callback, **options)

    apply.reports_base_exceptions = True  # type: ignore[attr-defined]
    pool.on_apply = apply


def _as_triple(callback: Callable[[Any], Any], result: Any) -> Any:
    if isinstance(result, ExceptionInfo):
        result = (1, result, 0.0)
    return callback(result)


def _on_worker_ready(sender: Any = None, **_: Any) -> None:
    from celery.concurrency.prefork import TaskPool as Prefork

    from celery_plus.transport import Transport

    consumer = sender
    transport = getattr(getattr(consumer, "connection", None), "transport", None)
    pool = getattr(consumer, "pool", None)
    if pool is None:
        return
    if not isinstance(transport, Transport):
        # Another broker: the coordination store's claims are under the same lease watch.
        if _coordinated(consumer):
            if not isinstance(pool, Prefork) and callable(getattr(pool, "on_apply", None)):
                report_base_exceptions(pool)  # else a SystemExit run keeps its claim for ever
            deadline.start(in_process_pool=not isinstance(pool, Prefork))
        return
    if isinstance(pool, Prefork):
        keep_handed_jobs(pool)
        count_handed_jobs(pool)
    elif callable(getattr(pool, "on_apply", None)):
        report_base_exceptions(pool)
    deadline.start(in_process_pool=not isinstance(pool, Prefork))


def _coordinated(consumer: Any) -> bool:
    """Whether the consumer's app keeps its claims in a coordination store."""
    from celery_plus.coordination import coordinator_for

    app = getattr(consumer, "app", None)
    return app is not None and coordinator_for(app) is not None


def install() -> None:
    """Apply to every worker started in this process (idempotent)."""
    signals.worker_ready.connect(_on_worker_ready, weak=False,
                                 dispatch_uid="celery_plus.worker.pool_guards")
