"""Remote control: ``inspect`` and ``control`` from Python and from the command line."""

import subprocess
import time

from proj.settings import PREFIX, QUEUES
from proj.tasks.arithmetic import mark
from scenarios.support import Context, Outcome, local, scenario

#: Queue fields a reply must carry (kombu's Queue.as_dict()).
QUEUE_FIELDS = ("name", "exchange", "routing_key", "durable", "exclusive", "auto_delete",
                "no_ack", "bindings", "queue_arguments", "binding_arguments")


def _queues(inspect_reply: dict, worker: str) -> list[Outcome]:
    return sorted(({"name": local(q["name"]), "routing_key": local(q["routing_key"]),
                    "exchange": local(q["exchange"]["name"]),
                    "fields": all(f in q for f in QUEUE_FIELDS)}
                   for q in inspect_reply.get(worker, [])), key=lambda q: q["name"])


def _for_worker(ctx: Context, reply: dict) -> dict:
    return {("<worker>" if node == ctx.worker else node): value for node, value in reply.items()}


@scenario
def inspect(ctx: Context) -> Outcome:
    """inspect ping / active_queues / registered / stats / active reply shapes."""
    insp = ctx.inspect()
    stats = (insp.stats() or {}).get(ctx.worker, {})
    registered = (insp.registered() or {}).get(ctx.worker, [])
    return {
        "ping": _for_worker(ctx, insp.ping() or {}),
        "control_ping": [_for_worker(ctx, r) for r in
                         ctx.app.control.ping(destination=[ctx.worker], timeout=5)],
        "active_queues": _queues(insp.active_queues() or {}, ctx.worker),
        "registered": sorted(t for t in registered if t.startswith("proj.")),
        "stats_fields": sorted(stats),
        "pool_size": stats.get("pool", {}).get("max-concurrency"),
        "active": _for_worker(ctx, _active_once_idle(ctx)),
    }


def _active_once_idle(ctx: Context, timeout: float = 5.0) -> dict:
    """The worker's active tasks once none is left (or after ``timeout``), beat's tick aside
    (it may be running at this moment).

    A task that replaced itself (``replace``, the scenario before) can still be active for a
    moment after its replacement's result came back (seen once, on ``plus+postgresql://``
    under load): it publishes the replacement before its own request ends in the pool.
    """
    deadline = time.monotonic() + timeout
    while True:
        active = {node: [t["name"] for t in tasks if "tick" not in t["name"]]
                  for node, tasks in (ctx.inspect().active() or {}).items()}
        if not any(active.values()) or time.monotonic() > deadline:
            return active
        time.sleep(0.05)


def _served_after_cancel(ctx: Context, cancelled: str, timeout: float = 10.0) -> list[str]:
    """The worker's queues once ``cancelled`` is gone from them (or after ``timeout``).

    Celery replies to ``cancel_consumer`` before it cancels (``consumer.call_soon``), so an
    ``active_queues`` sent right after the reply may still list the queue, on plain Celery too.
    """
    deadline = time.monotonic() + timeout
    while True:
        names = [q["name"] for q in _queues(ctx.inspect().active_queues() or {}, ctx.worker)]
        if local(cancelled) not in names or time.monotonic() > deadline:
            return names
        time.sleep(0.05)


@scenario
def consumers(ctx: Context) -> Outcome:
    """control add_consumer / cancel_consumer change the queues a worker serves."""
    extra = f"{PREFIX}.extra"
    added = ctx.app.control.add_consumer(extra, destination=[ctx.worker], reply=True,
                                         timeout=5)
    served = mark.apply_async(("extra",), queue=extra).get(timeout=ctx.timeout)
    during = [q["name"] for q in _queues(ctx.inspect().active_queues() or {}, ctx.worker)]
    cancelled = ctx.app.control.cancel_consumer(extra, destination=[ctx.worker], reply=True,
                                                timeout=5)
    after = _served_after_cancel(ctx, extra)

    def replies(rs: list[dict]) -> list[dict]:
        return [{node: {k: local(v) for k, v in r.items()}
                 for node, r in _for_worker(ctx, reply).items()} for reply in rs]

    return {"add": replies(added), "served": served, "queues_during": during,
            "cancel": replies(cancelled), "queues_after": after,
            "configured": sorted(local(q) for q in QUEUES)}


def _cli(ctx: Context, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ctx.cli, "-A", "proj", *args], capture_output=True, text=True,
                          timeout=60)


@scenario
def command_line(ctx: Context) -> Outcome:
    """`celery inspect ping` and `celery control revoke` reach the worker."""
    ping = _cli(ctx, "inspect", "ping", "-d", ctx.worker, "--timeout", "5")
    revoke = _cli(ctx, "control", "revoke", "0" * 8, "-d", ctx.worker, "--timeout", "5")
    return {
        "inspect_ping": [ping.returncode, "pong" in ping.stdout, ctx.worker in ping.stdout],
        "control_revoke": [revoke.returncode, "flagged as revoked" in revoke.stdout],
    }
