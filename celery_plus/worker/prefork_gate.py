"""A prefork worker on the ``plus`` transport hands tasks to its pool without blocking.

The ``plus`` transport is synchronous, so Celery runs its worker with the synchronous loop
(``synloop``) instead of the event loop (hub) kombu's Redis transport gets. There Celery
creates the prefork pool with *put locks*: handing a task to a pool whose processes are all
busy blocks the consumer thread until one frees. That thread is also the one that answers
remote control, so ``inspect``/``control`` went unanswered (Celery waits 1 s) while prefetched
tasks waited for a process — e.g. right after an ETA task came due.

Celery's event loop never blocks there: it takes a pool slot with a callback semaphore, parks
the request when none is free and dispatches it when a process finishes a job (checking then
whether it was revoked meanwhile). :func:`install` gives a prefork worker on the ``plus``
transport that same arrangement: a thread-safe :class:`SlotGate` is the billiard pool's
semaphore (billiard releases it as each job ends, from its result thread) and the worker's
``process_task`` takes a slot from it without blocking. Nothing changes for other transports,
other pools, a worker on the event loop, or one with ``worker_pool_putlocks=False``.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Any

from celery import concurrency, signals

logger = logging.getLogger("celery_plus.worker")


class SlotGate:
    """A lax bounded semaphore whose ``acquire`` never blocks (kombu's, made thread-safe).

    ``acquire(callback, *args)`` runs ``callback`` at once when a slot is free and otherwise
    queues it; ``release()`` hands the slot to the oldest queued callback, in the releasing
    thread. The value never exceeds the initial value, however often it is released.
    """

    def __init__(self, value: int = 1) -> None:
        self.initial_value = self.value = value
        self._waiting: deque[tuple[Callable[..., Any], tuple[Any, ...]]] = deque()
        self._lock = threading.Lock()
        self._local = threading.local()

    def acquire(self, callback: Callable[..., Any], *args: Any) -> bool:
        with self._lock:
            if self.value <= 0:
                self._waiting.append((callback, args))
                return False
            self.value -= 1
        callback(*args)
        return True

    def release(self) -> None:
        # A callback may release again (a revoked task frees its slot at once): those
        # releases are counted and served by this loop, not by recursion.
        local = self._local
        if getattr(local, "releasing", False):
            local.pending += 1
            return
        local.releasing, local.pending = True, 1
        try:
            while local.pending:
                local.pending -= 1
                with self._lock:
                    if not self._waiting:
                        self.value = min(self.value + 1, self.initial_value)
                        continue
                    callback, args = self._waiting.popleft()
                try:
                    callback(*args)
                except Exception:
                    logger.critical("celery-plus: could not hand a task to the pool",
                                    exc_info=True)
                    local.pending += 1  # its slot was not used
        finally:
            local.releasing = False

    def grow(self, n: int = 1) -> None:
        with self._lock:
            self.initial_value += n
        for _ in range(n):
            self.release()

    def shrink(self, n: int = 1) -> None:
        with self._lock:
            self.initial_value = max(self.initial_value - n, 0)
            self.value = max(self.value - n, 0)

    def clear(self) -> None:
        with self._lock:
            self._waiting.clear()
            self.value = self.initial_value


def gated_pool_class(base: type, worker: Any) -> type:
    """``base`` (a prefork ``TaskPool``) whose billiard pool releases a :class:`SlotGate`,
    installed as ``worker``'s non-blocking ``process_task``."""

    class TaskPool(base):
        def __init__(self, limit: int | None = None, putlocks: bool = True,
                     **options: Any) -> None:
            gate = SlotGate(limit or 1)
            options["semaphore"] = gate
            super().__init__(limit, putlocks=False, **options)
            self.slot_gate = gate
            # As on the event loop: the consumer clears waiting requests when its
            # connection closes (their deliveries cannot be acked any more).
            worker.semaphore = gate
            worker._quick_acquire = gate.acquire
            worker._quick_release = gate.release
            worker.process_task = worker._process_task_sem

    # Celery names a pool by its class path (``worker_concurrency='auto'`` maps it back to
    # the alias "prefork"): this is the prefork pool, dispatching differently.
    TaskPool.__module__, TaskPool.__qualname__ = base.__module__, base.__qualname__
    TaskPool.__name__ = base.__name__
    return TaskPool


def _on_worker_init(sender: Any = None, **_: Any) -> None:
    from celery.concurrency.prefork import TaskPool as Prefork

    from celery_plus.transport import Transport

    worker = sender
    if worker is None or getattr(worker, "use_eventloop", True) or not worker.pool_putlocks:
        return
    try:
        uses_plus = issubclass(worker._conninfo.get_transport_cls(), Transport)
        base = concurrency.get_implementation(worker.pool_cls)
    except Exception:  # not a worker this module understands: leave it as it is
        return
    if uses_plus and isinstance(base, type) and issubclass(base, Prefork):
        worker.pool_cls = gated_pool_class(base, worker)


def install() -> None:
    """Apply to every worker started in this process (idempotent)."""
    signals.worker_init.connect(_on_worker_init, weak=False,
                                dispatch_uid="celery_plus.worker.prefork_gate")
