"""How a store's ``wait`` looks for work and blocks until there may be some: one loop for the
stores whose wake-ups are a signal to look again (PostgreSQL's ``LISTEN``, SQLite's socket)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

#: What ``wait`` returns: ``("wake", queue, None)`` or ``("transient", queue, body)``.
Wake = tuple[str, str, bytes | None]


@dataclass(frozen=True)
class Due:
    """What a worker's queues hold now: a queue with an enqueued job, else the queue of the
    soonest scheduled job and how many seconds until it is due."""

    ready: str | None = None
    scheduled: str | None = None
    due_in_s: float | None = None


def wait_for_work(look: Callable[[], Due], pop_transient: Callable[[str], bytes | None],
                  transient: Sequence[str], block: Callable[[float], None],
                  timeout: float) -> Wake | None:
    """Look (``look``, then a message of each ``transient`` queue); while nothing is there,
    ``block`` until a wake-up, the soonest scheduled job's due time or ``timeout``, and look
    again. None when ``timeout`` seconds passed with nothing."""
    deadline = time.monotonic() + max(timeout, 0.0)
    while True:
        due = look()
        if due.ready is not None:
            return ("wake", due.ready, None)
        if due.scheduled is not None and due.due_in_s is not None and due.due_in_s <= 0:
            return ("wake", due.scheduled, None)
        for queue in transient:
            body = pop_transient(queue)
            if body is not None:
                return ("transient", queue, body)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        pause = remaining if due.due_in_s is None else min(remaining, max(due.due_in_s, 0.001))
        block(pause)
