"""A reconnect keeps the jobs a prefork pool already handed to its processes.

When the broker connection fails, Celery's consumer flushes its prefork pool (``AsynPool.flush``,
on the event loop): every job a pool process has not *accepted* yet is discarded, "since the
broker redelivers it". The pool counts a job as accepted only once it has read the process's
acknowledgement, so a job already written to a process, which that process reads and runs, is
discarded too: its result is ignored and Celery drops its message.

On the ``plus`` transport a claim outlives its connection (``transport/holdings.py``), and a
delivery Celery drops gives its claim back: the store delivers the job again while the pool
process still runs it, and it runs twice (found with short jobs and Redis ``CLIENT KILL``). So
a worker consuming from the ``plus`` transport flushes its pool treating the jobs already
handed to a process as started: they stay in the pool, and their results are acked through
their kept claims. Jobs still waiting in the pool's own buffer are discarded as before: they
never run, and their claims go back to the store.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celery import signals


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


def _on_worker_ready(sender: Any = None, **_: Any) -> None:
    from .transport import Transport

    consumer = sender
    transport = getattr(getattr(consumer, "connection", None), "transport", None)
    if isinstance(transport, Transport) and getattr(consumer, "pool", None) is not None:
        keep_handed_jobs(consumer.pool)


def install() -> None:
    """Apply to every worker started in this process (idempotent)."""
    signals.worker_ready.connect(_on_worker_ready, weak=False,
                                 dispatch_uid="celery_plus.prefork_flush")
