"""Canvas: chain, group, chord, link/link_error callbacks and Task.replace."""

from celery import chain, chord, group, states

from proj.effects import effects
from proj.tasks.arithmetic import add, fail, tsum
from proj.tasks.workflows import on_done, on_error, step, sum_of_squares, total
from scenarios.support import Context, Outcome, error_of, scenario, wait_for, wait_for_effects


@scenario
def chains(ctx: Context) -> Outcome:
    """A chain runs its steps in order, each getting the previous result."""
    result = chain(step.s([], "a"), step.s("b"), step.s("c"))()
    final = result.get(timeout=ctx.timeout)
    mixed = chain(add.s(1, 1), group(add.s(1), add.s(2)), tsum.s())()
    return {"result": final, "parent": result.parent.get(timeout=ctx.timeout),
            "order": [e["name"] for e in effects("step")],
            "chain_group_chord": mixed.get(timeout=ctx.timeout)}


@scenario
def groups(ctx: Context) -> Outcome:
    """A group returns its results in call order; chunks split the work into groups."""
    result = group(add.s(i, i) for i in range(6))()
    values = result.get(timeout=ctx.timeout)
    chunked = add.chunks(zip(range(6), range(6), strict=True), 2)().get(timeout=ctx.timeout)
    return {"results": values, "successful": result.successful(),
            "completed": result.completed_count(), "size": len(result), "chunks": chunked}


@scenario
def chords(ctx: Context) -> Outcome:
    """A chord calls its body once with every header result; a failed header fails it."""
    result = chord(add.s(i, i) for i in range(5))(tsum.s())
    value = result.get(timeout=ctx.timeout)
    broken = chord([add.s(1, 1), fail.s("header failed")])(tsum.s())
    wait_for(lambda: broken.state in states.READY_STATES, "chord body to fail", ctx.timeout)
    try:
        broken.get(timeout=ctx.timeout)
        raised = None
    except Exception as exc:  # get() re-raises the header's failure first
        raised = {"type": type(exc).__name__, "message": str(exc)}
    return {"result": value, "callback_calls": [e["numbers"] for e in effects("tsum")],
            "failed_header": {"raised": raised, "state": broken.state,
                              "body_error": error_of(broken)["type"]}}


@scenario
def links(ctx: Context) -> Outcome:
    """link gets the parent's result; link_error gets (request, exc, traceback)."""
    ok = add.apply_async((2, 2), link=on_done.s("sum"))
    bad = fail.apply_async(("no such user",), link_error=on_error.s())
    value = ok.get(timeout=ctx.timeout)
    bad.get(timeout=ctx.timeout, propagate=False)
    linked = wait_for_effects("linked", tag="sum")
    errback = wait_for_effects("errback")
    return {"result": value, "linked": [e["result"] for e in linked],
            "errback": [{k: e[k] for k in ("task", "exception", "message", "has_traceback")}
                        for e in errback],
            "failed_state": bad.state}


@scenario
def replace(ctx: Context) -> Outcome:
    """Task.replace: the caller (or the next chain step) gets the replacement's result."""
    direct = total.delay(4, 5)
    value = direct.get(timeout=ctx.timeout)
    in_chain = chain(total.s(1, 2), add.s(10))()
    chained = in_chain.get(timeout=ctx.timeout)
    with_canvas = sum_of_squares.delay([1, 2, 3])
    by_canvas = with_canvas.get(timeout=ctx.timeout)
    # The replaced delivery may still be finishing when the replacement's result is in (its
    # task_postrun comes after Task.replace): wait for both ends of each id, so the next
    # scenario sees an idle worker.
    for task_id in (direct.id, in_chain.parent.id, with_canvas.id):
        wait_for_effects("signal", n=2, signal="task_postrun", id=task_id)
    return {"result": value, "state": direct.state,
            "replaced_runs": len(effects("replaced", id=direct.id)),
            "in_chain": chained,
            "replaced_by_chain": by_canvas}
