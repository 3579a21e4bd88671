"""Time: countdown/ETA, expiry, revoking, time limits, and where an ETA task waits."""

import time
from datetime import datetime, timedelta, timezone

from celery import states
from celery.exceptions import TaskRevokedError, TimeLimitExceeded

from proj.effects import effects
from proj.tasks.arithmetic import mark, slow
from proj.tasks.limits import crunch, hang
from scenarios.support import (
    EXECUTION_SIGNALS,
    Context,
    Outcome,
    error_of,
    on_time,
    scenario,
    signal_trail,
    wait_for,
    wait_for_effects,
)


def _marked(tag: str) -> int:
    return len(effects("mark", tag=tag))


def _revoked_signals(task_id: str) -> list[dict[str, bool]]:
    return [{"terminated": e["terminated"], "expired": e["expired"]}
            for e in effects("signal", signal="task_revoked", id=task_id)]


@scenario
def countdown_and_eta(ctx: Context) -> Outcome:
    """countdown= and eta= run the task once, on time (not before, and promptly after)."""
    start = time.time()
    later = mark.apply_async(("countdown",), countdown=1)
    at = mark.apply_async(("eta",), eta=datetime.now(timezone.utc) + timedelta(seconds=1.5))
    later.get(timeout=ctx.timeout)
    at.get(timeout=ctx.timeout)
    ran = {e["tag"]: e for e in effects("mark")}
    return {"countdown_on_time": on_time(start, ran["countdown"]["t"], ran["countdown"]["eta"],
                                         1.0),
            "eta_on_time": on_time(start, ran["eta"]["t"], ran["eta"]["eta"], 1.5),
            "states": [later.state, at.state], "runs": [_marked("countdown"), _marked("eta")]}


@scenario
def expires(ctx: Context) -> Outcome:
    """A task whose expiry passes before it can run is revoked (expired), never run."""
    expired = mark.apply_async(("expired",), countdown=1.5, expires=0.5)
    fresh = mark.apply_async(("fresh",), expires=30)
    fresh.get(timeout=ctx.timeout)
    wait_for(lambda: expired.state == states.REVOKED, "expired task REVOKED", ctx.timeout)
    try:
        expired.get(timeout=ctx.timeout)
        raised = None
    except TaskRevokedError as exc:
        raised = type(exc).__name__
    wait_for_effects("signal", signal="task_revoked", id=expired.id)
    return {"fresh": fresh.state, "expired": expired.state, "get_raises": raised,
            "runs": [_marked("fresh"), _marked("expired")],
            "revoked_signal": _revoked_signals(expired.id)}


@scenario
def revoke(ctx: Context) -> Outcome:
    """control.revoke (broadcast) of a waiting task: it never runs and ends REVOKED."""
    doomed = mark.apply_async(("revoked",), countdown=1.5)
    replies = ctx.app.control.revoke(doomed.id, reply=True, destination=[ctx.worker],
                                     timeout=5)
    sentinel = mark.apply_async(("sentinel",), countdown=2)
    sentinel.get(timeout=ctx.timeout)
    wait_for(lambda: doomed.state == states.REVOKED, "revoked task REVOKED", ctx.timeout)
    return {
        "replies": [{("<worker>" if node == ctx.worker else node):
                     {k: v.replace(doomed.id, "<id>") for k, v in reply.items()}
                     for node, reply in r.items()} for r in replies],
        "state": doomed.state, "runs": [_marked("revoked"), _marked("sentinel")],
        "revoked_in_worker": doomed.id in (ctx.inspect().revoked() or {}).get(ctx.worker, []),
    }


@scenario(pools=("prefork", "gevent"))
def revoke_terminate(ctx: Context) -> Outcome:
    """revoke(terminate=True) stops a running task: REVOKED, started once, never finished."""
    running = slow.delay(30, "terminated")
    wait_for_effects("slow_start", tag="terminated")
    ctx.app.control.revoke(running.id, terminate=True, destination=[ctx.worker])
    wait_for(lambda: running.state == states.REVOKED, "terminated task REVOKED", ctx.timeout)
    after = mark.delay("after-terminate")
    after.get(timeout=ctx.timeout)
    return {"state": running.state, "starts": len(effects("slow_start", tag="terminated")),
            "ends": len(effects("slow_end", tag="terminated")),
            "revoked_signal": _revoked_signals(running.id)}


@scenario(pools=("prefork",))
def time_limits(ctx: Context) -> Outcome:
    """soft_time_limit raises inside the task; time_limit kills it (TimeLimitExceeded)."""
    soft = crunch.delay(10)
    hard = hang.delay(10)
    partial = soft.get(timeout=ctx.timeout)
    try:
        hard.get(timeout=ctx.timeout)
        raised = None
    except TimeLimitExceeded as exc:
        raised = type(exc).__name__
    after = mark.delay("after-time-limit").get(timeout=ctx.timeout)
    # The killed task's last signals come after its result is stored.
    wait_for_effects("signal", signal="task_postrun", id=hard.id)
    return {"soft": [partial, soft.state, len(effects("crunch_interrupted"))],
            "hard": {"raised": raised, "state": hard.state, "error": error_of(hard)["type"],
                     "started": len(effects("hang_start")), "ended": len(effects("hang_end")),
                     "signals": signal_trail(hard.id, only=EXECUTION_SIGNALS)},
            "worker_still_serves": after}


@scenario
def eta_waits_and_purge(ctx: Context) -> Outcome:
    """Where a countdown task waits (worker memory or the store) and whether purge drops it."""
    waiting = mark.apply_async(("purged",), countdown=2)
    # A task published after it on the same queue: once it ran, the worker has seen the
    # countdown task (if the broker delivers early) — no sleeping.
    mark.delay("marker").get(timeout=ctx.timeout)
    scheduled = (ctx.inspect().scheduled() or {}).get(ctx.worker, [])
    purged = ctx.app.control.purge()
    mark.apply_async(("after-purge",), countdown=2.5).get(timeout=ctx.timeout)
    if not purged:  # still waiting (in a worker): it must run
        waiting.get(timeout=ctx.timeout)
    return {"scheduled_in_worker": len(scheduled), "purged": purged,
            "ran": _marked("purged"), "state": waiting.state}
