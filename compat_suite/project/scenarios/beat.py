"""Beat: the schedule in ``beat_schedule`` runs its task every second (beat runs beside the
worker from the deployment's start)."""

from proj.effects import effects
from scenarios.support import Context, Outcome, local, scenario, wait_for_effects


@scenario
def beat(ctx: Context) -> Outcome:
    """beat_schedule: the tick entry runs repeatedly, routed like any call of its task."""
    wait_for_effects("tick", n=2, timeout=ctx.timeout, source="beat")
    ticks = effects("tick")
    return {"at_least_two": len(ticks) >= 2, "sources": sorted({t["source"] for t in ticks}),
            "queues": sorted({local(t["queue"]) for t in ticks})}
