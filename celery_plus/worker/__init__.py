"""Everything celery-plus connects to Celery's worker and billiard's pool, connected once.

:func:`install` is the one entry: importing ``celery_plus`` calls it, and no module of the
package patches or connects anything when it is imported. It hands tasks to a prefork pool
without blocking (``prefork_gate.py``), guards the pools against two Celery quirks that would
run a job twice or hold it for ever (``pool_guards.py``), answers ``inspect scheduled`` from
the store (``control.py``), watches each prefork pool process for a thaw past its lease
(``thaw_guard.py``), notes that this process runs a worker (``runtime/worker_state.py``) and
carries a replaced task's lease token into its replacement (``leases/tokens.py``). The
worker's bootsteps (``bootsteps.py``) are added per app, by ``celery_plus.Celery``.
"""

from __future__ import annotations

import threading

from celery import signals

from celery_plus.leases import tokens
from celery_plus.runtime import worker_state
from celery_plus.worker import control, pool_guards, prefork_gate, thaw_guard

_installed = False
_lock = threading.Lock()


def install() -> None:
    """Connect celery-plus to Celery's worker in this process (idempotent). A worker refuses
    to start on a Celery or billiard outside the versions whose private parts the patches
    were checked against (``versions.py``, checked by the ``DurableSetup`` bootstep): other
    processes (publishers, web servers, beat) use none of the patches and import as usual."""
    global _installed
    with _lock:
        if _installed:
            return
        prefork_gate.install()
        pool_guards.install()
        control.install()
        signals.worker_init.connect(worker_state.worker_started, weak=False,
                                    dispatch_uid="celery_plus.worker_state")
        signals.worker_process_init.connect(thaw_guard.watch_pool_process, weak=False,
                                            dispatch_uid="celery_plus.thaw_guard")
        signals.before_task_publish.connect(tokens.carry_into_replacement, weak=False,
                                            dispatch_uid="celery_plus.tokens")
        _installed = True


__all__ = ["install"]
