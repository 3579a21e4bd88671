"""Followers: how a coalesced canvas member still completes its canvas.

When a publish is coalesced into the job holding its unique key, plain ``delay()`` gets the
holder's ``AsyncResult``. A canvas member cannot: its id is already in a ``GroupResult``, a
chord's header or a chain's parents, and its callbacks, chain and chord part travel in its
own message. So a coalesced canvas member (:func:`needs_follower`) gets a *follower*: a
small task, published under the member's own id with the member's options (callbacks,
errbacks, chain, chord, group, queue, priority), that completes from the holder's outcome:

* the holder succeeded → the follower returns the holder's result;
* the holder failed or was revoked → the follower fails with the holder's exception;
* the holder has not finished → the follower is scheduled again in the store (a countdown,
  backing off from 0.05 s to 2 s): it never holds a worker while it waits;
* the holder was canceled in the store (the admin) → the follower fails as revoked;
* the holder cannot finish any more (no record in the store and no result, or finished
  without a stored result) → the follower fails with :class:`FollowError`.

Followers read the holder's outcome from the result backend, so they need one that a worker can
read another caller's results from: with none, or with ``rpc://`` (a result reaches only the
client that published its task), a follower fails at once with :class:`FollowError` saying
so. The task is
named ``celery.plus_follow``: like Celery's own ``celery.*`` tasks, it is left out of
``inspect registered`` and the worker banner.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from celery import states
from celery.backends.base import DisabledBackend
from celery.backends.rpc import RPCBackend
from celery.exceptions import Ignore, TaskRevokedError

FOLLOW_TASK = "celery.plus_follow"
#: Options that make a coalesced publish part of a canvas (its own id is awaited).
CANVAS_OPTIONS = ("link", "link_error", "chain", "chord", "group_id")
#: Polling back-off of a follower waiting for its holder (seconds).
FIRST_WAIT_S, LONGEST_WAIT_S = 0.05, 2.0
#: Store states of a holder that will not produce a result any more.
ENDED = frozenset({"completed", "failed", "canceled", "discarded"})


class FollowError(RuntimeError):
    """The holder a follower waits for will never produce an outcome to follow."""


def needs_follower(options: Mapping[str, Any]) -> bool:
    """True when something awaits the coalesced publish's own id: canvas options
    (callbacks, the rest of a chain, a chord, a group), or a workflow step published with
    its chosen id from inside a task (a chain's later steps: ``task_id`` and ``parent_id``).
    A plain call, even with ``task_id=``, gets the holder's result as before."""
    if any(options.get(name) for name in CANVAS_OPTIONS):
        return True
    return bool(options.get("task_id") and options.get("parent_id"))


def follower_options(options: Mapping[str, Any], task_id: str, name: str) -> dict[str, Any]:
    """The follower's publish options: the member's own, under its id, routed like it,
    without the member's extension header (a follower coalesces with nothing)."""
    follower = {k: v for k, v in options.items() if k not in ("task_type", "shadow")}
    headers = dict(options.get("headers") or {})
    headers.pop("plus", None)
    follower.update(task_id=task_id, headers=headers, route_name=name)
    return follower


def wait_after(attempt: int) -> float:
    return min(FIRST_WAIT_S * 2 ** min(attempt, 16), LONGEST_WAIT_S)


def _store_state(app: Any, holder_id: str) -> str | None:
    """The holder's job state in the durable store (None: no record, or no store)."""
    with app.pool.acquire(block=True) as conn:
        backend = getattr(conn.default_channel, "backend", None)
        record = backend.record(holder_id) if backend is not None else None
    return None if record is None else str(record.state)


def _outcome(holder_id: str, state: str, result: Any) -> Any:
    """The follower's return value for a holder that finished (raises its failure)."""
    if state == states.SUCCESS:
        return result
    if state == states.REVOKED:
        raise TaskRevokedError(f"followed job {holder_id} was revoked")
    if isinstance(result, BaseException):
        raise result
    raise FollowError(f"followed job {holder_id} failed: {result!r}")


def follow(task: Any, holder_id: str) -> Any:
    """The body of ``celery.plus_follow``: the holder's result, or its failure."""
    if isinstance(task.app.backend, DisabledBackend):
        raise FollowError(
            f"cannot follow job {holder_id}: a coalesced canvas member completes from its "
            "holder's result, and this app has no result backend (set result_backend)")
    if isinstance(task.app.backend, RPCBackend):
        raise FollowError(
            f"cannot follow job {holder_id}: a coalesced canvas member completes from its "
            "holder's result, and the rpc:// result backend delivers a result only to the "
            "client that published its task (set a result_backend workers can read, such "
            "as redis://)")
    holder = task.app.AsyncResult(holder_id)
    if holder.state in states.READY_STATES:
        return _outcome(holder_id, holder.state, holder.result)
    if holder.state == states.PENDING:
        stored = _store_state(task.app, holder_id)
        if stored is None or stored in ENDED:
            holder = task.app.AsyncResult(holder_id)  # it may have landed meanwhile
            if holder.state in states.READY_STATES:
                return _outcome(holder_id, holder.state, holder.result)
            if stored == "canceled":
                raise TaskRevokedError(f"followed job {holder_id} was canceled")
            raise FollowError(
                f"followed job {holder_id} cannot finish with a result: "
                + ("the store has no record of it" if stored is None else
                   f"it is {stored} and stored no result (ignore_result?)"))
    attempt = task.request.retries or 0
    again = task.signature_from_request(args=(holder_id,), kwargs={},
                                        countdown=wait_after(attempt), retries=attempt + 1)
    again.apply_async()
    raise Ignore()


def register(app: Any) -> None:
    """Declare ``celery.plus_follow`` on ``app`` (registered when the app finalizes)."""
    app.task(name=FOLLOW_TASK, bind=True, lazy=True, ignore_result=False,
             acks_late=True)(follow)
