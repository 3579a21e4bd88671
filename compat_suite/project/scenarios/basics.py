"""Calling tasks and reading results: values, failures, states, signals, routing."""

from celery import states
from celery.result import AsyncResult

from proj.effects import effects
from proj.settings import REPORTS_QUEUE
from proj.tasks.arithmetic import add, fail, mark, mul, slow
from proj.tasks.reports import build
from scenarios.support import (
    ALL_SIGNALS,
    Context,
    Outcome,
    error_of,
    local,
    scenario,
    signal_trail,
    wait_for,
    wait_for_effects,
)


@scenario
def results(ctx: Context) -> Outcome:
    """delay/apply_async results, AsyncResult state and extended result fields."""
    positional = add.delay(2, 3)
    keywords = add.apply_async(kwargs={"x": 10, "y": 5})
    value = positional.get(timeout=ctx.timeout)
    again = AsyncResult(keywords.id, app=ctx.app)
    return {
        "delay": value,
        "apply_async_kwargs": keywords.get(timeout=ctx.timeout),
        "state": again.state,
        "ready": again.ready(),
        "successful": again.successful(),
        "extended": {"name": again.name, "args": again.args, "kwargs": again.kwargs,
                     "queue": local(again.queue), "retries": again.retries},
    }


@scenario
def failure(ctx: Context) -> Outcome:
    """A task raising: FAILURE state, the exception re-raised by get(), the traceback."""
    result = fail.delay("bad input")
    try:
        result.get(timeout=ctx.timeout)
        raised = None
    except ValueError as exc:
        raised = {"type": type(exc).__name__, "message": str(exc)}
    return {"raised": raised, "state": result.state, "error": error_of(result),
            "has_traceback": "ValueError" in (result.traceback or ""),
            "failed": result.failed()}


@scenario
def task_states(ctx: Context) -> Outcome:
    """task_track_started: a running task is STARTED, then SUCCESS."""
    result = slow.delay(1.0, "states")
    seen: list[str] = []

    def finished() -> bool:
        state = result.state
        if not seen or seen[-1] != state:
            seen.append(state)
        return state in states.READY_STATES

    wait_for(finished, "slow task to finish", ctx.timeout, interval=0.02)
    return {"states": [s for s in seen if s != states.PENDING], "result": result.get()}


@scenario
def signals(ctx: Context) -> Outcome:
    """Publish and task signals fire in order for a success and a failure."""
    ok = add.delay(1, 1)
    bad = fail.delay("signal me")
    ok.get(timeout=ctx.timeout)
    bad.get(timeout=ctx.timeout, propagate=False)
    wait_for_effects("signal", signal="task_postrun", id=bad.id)
    wait_for_effects("signal", signal="task_postrun", id=ok.id)
    publish = effects("signal", signal="before_task_publish", id=ok.id)
    # after_task_publish fires once the message is on the broker: a worker may receive it
    # first, so its place in the trail is not Celery's to guarantee (its presence is).
    ordered = tuple(s for s in ALL_SIGNALS if s != "after_task_publish")
    return {
        "success": signal_trail(ok.id, only=ordered),
        "failure": signal_trail(bad.id, only=ordered),
        "published": [signal_trail(i).count("after_task_publish") for i in (ok.id, bad.id)],
        "failure_exception": [e.get("exception") for e in effects("signal", id=bad.id)
                              if e["signal"] == "task_failure"],
        "postrun_states": [[e.get("state") for e in effects("signal", signal="task_postrun",
                                                            id=task_id)]
                           for task_id in (ok.id, bad.id)],
        "publish_routing_key": [local(e["routing_key"]) for e in publish],
    }


@scenario
def routing(ctx: Context) -> Outcome:
    """task_routes send tasks to their queues; queue= overrides the route."""
    product = mul.delay(6, 7).get(timeout=ctx.timeout)
    report = build.delay("monthly").get(timeout=ctx.timeout)
    mark.apply_async(("explicit",), queue=REPORTS_QUEUE).get(timeout=ctx.timeout)
    default = mark.delay("default").get(timeout=ctx.timeout)
    return {
        "mul": [product, [local(e["queue"]) for e in effects("mul")]],
        "build": [report, [local(e["queue"]) for e in effects("build")]],
        "marks": sorted([e["tag"], local(e["queue"])] for e in effects("mark")
                        if e["tag"] in ("explicit", default)),
    }
