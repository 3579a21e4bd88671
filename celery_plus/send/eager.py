"""Eager mode (``task_always_eager``) with the extension options applied as a worker would.

``apply_async`` of an eager app runs the task at once, in the caller. What celery-plus keeps:

* the publish-time checks: arguments are bound to the signature (a call that does not fit
  raises ``TypeError`` naming the task) and the unique key / concurrency scope is built (an
  argument that is not JSON raises ``TypeError`` naming the task, option and argument);
* uniqueness against the process's own record of holds, per app: a ``ttl`` window is held
  for its TTL from the call, a ``running`` window while the task runs (a task that calls
  itself with the same key is coalesced), a ``pending`` window never (an eager task starts
  at once). A duplicate returns the holder's ``EagerResult`` with ``.deduplicated`` True
  (or raises ``DuplicateTask`` with ``unique_on_duplicate="raise"``) and fires
  ``task_deduplicated``;
* ``.deduplicated`` is False on every other ``EagerResult``.

``concurrency`` and ``max_deliveries`` have nothing to act on (one call at a time, no
redelivery). Canvas in eager mode runs its members with Celery's ``apply()``, which checks
nothing.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import Any

from celery import states, uuid
from celery.result import EagerResult

from celery_plus import signals
from celery_plus.exceptions import DuplicateTask
from celery_plus.send.options import message_extensions


@dataclass
class Hold:
    holder_id: str
    #: The holder's result once it returned (a running hold is dropped then).
    result: EagerResult | None = None
    #: time.monotonic() after which the hold is gone (None: while running).
    expires: float | None = None


class EagerHolds:
    """The unique holds of one app's eager calls."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.holds: dict[str, Hold] = {}

    def holder(self, key: str) -> Hold | None:
        with self.lock:
            hold = self.holds.get(key)
            if hold is not None and hold.expires is not None and hold.expires <= time.monotonic():
                del self.holds[key]
                return None
            return hold

    def take(self, key: str, hold: Hold) -> None:
        with self.lock:
            self.holds[key] = hold

    def drop(self, key: str, holder_id: str) -> None:
        with self.lock:
            if (hold := self.holds.get(key)) is not None and hold.holder_id == holder_id:
                del self.holds[key]


def holds_of(app: Any) -> EagerHolds:
    holds = app.__dict__.get("_plus_eager_holds")
    if holds is None:
        holds = app.__dict__.setdefault("_plus_eager_holds", EagerHolds())
    return holds


def apply_async(task: Any, run: Any, args: Any, kwargs: Any, task_id: str | None,
                options: dict[str, Any]) -> EagerResult:
    """``task.apply_async`` on an eager app; ``run(task_id)`` is Celery's own eager call."""
    task_id = task_id or uuid()
    ext = task.plus_extensions
    header: dict[str, Any] = {}
    if ext is not None:
        header = message_extensions(ext, task.name, task.plus_binder.bind(args, kwargs))
    unique = header.get("u")
    if not unique or unique[1] == "pending":
        result: EagerResult = run(task_id)
        result.deduplicated = False
        return result
    key, window, ttl_ms = unique
    holds = holds_of(task._get_app())
    hold = holds.holder(key)
    if hold is not None:
        signals.task_deduplicated.send(sender=task.name, task_id=task_id,
                                       holder_id=hold.holder_id, unique_key=key)
        if ext.unique_on_duplicate == "raise":
            raise DuplicateTask(task.name, hold.holder_id, key)
        done = hold.result
        found = (EagerResult(done.id, done._result, done._state, traceback=done._traceback,
                             name=done._name) if done is not None
                 else EagerResult(hold.holder_id, None, states.STARTED))
        found.deduplicated = True
        return found
    mine = Hold(task_id, expires=time.monotonic() + ttl_ms / 1000 if window == "ttl" else None)
    holds.take(key, mine)
    try:
        result = run(task_id)
    finally:
        if window == "running":
            holds.drop(key, task_id)
    mine.result = result
    result.deduplicated = False
    return result
