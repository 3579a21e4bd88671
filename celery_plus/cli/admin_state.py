"""``celery-plus workers``: the workers by Celery node name with their health, from the
store's worker records and leases (``admin/workers.py``); ``--ask`` adds one remote-control
broadcast (who answers, and the queues each consumes now). ``celery-plus limits``:
concurrency and rate-limit usage per key (``admin/limits.py``)."""

from __future__ import annotations

from collections.abc import Sequence

import click
from celery.bin.base import CeleryCommand

from celery_plus.admin import limits as admin_limits
from celery_plus.admin import workers as admin_workers
from celery_plus.admin.text import age, when
from celery_plus.cli.admin import _admin, _echo, _emit_json, table


def workers_text(views: Sequence[admin_workers.WorkerView], now_ms: int, asked: bool) -> str:
    if not views:
        return "no worker record in the store, and no worker holds a job"
    headers = ["WORKER", "HEALTH", "HOST", "PID", "UP SINCE", "LAST BEAT", "JOBS", "QUEUES"]
    rows = []
    for v in views:
        beat = ("-" if v.last_heartbeat_ms is None
                else f"{age(max(now_ms - v.last_heartbeat_ms, 0) / 1000)} ago")
        row = [v.node or "(no record)", v.health, v.host or "-",
               v.pid if v.pid is not None else "-",
               when(v.started_ms) if v.started_ms else "-", beat, v.jobs,
               "-" if v.queues is None else ",".join(v.queues) or "none"]
        if asked:
            row.append("yes" if v.answered else "no")
        rows.append(row)
    return table(headers + (["ANSWERED"] if asked else []), rows)


@click.command(cls=CeleryCommand, name="workers")
@click.option("--ask", is_flag=True,
              help="Also ask the workers (one remote-control broadcast, 1 s).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def workers(ctx: click.Context, ask: bool, as_json: bool) -> None:
    """The workers by Celery node name, with health (alive, late, gone), from the store."""
    with _admin(ctx) as admin:
        now = admin.store.now_ms()
        views = admin_workers.workers(admin, now)
        if ask:
            admin_workers.ask(admin, views)
    if as_json:
        _emit_json([v.to_dict() for v in views])
    else:
        _echo(workers_text(views, now, ask))




def limits_text(entries: Sequence[admin_limits.TaskLimits]) -> str:
    if not entries:
        return "no concurrency or rate-limit group in use"
    rows = []
    for t in entries:
        for k in t.keys:
            used = (f"{k.used}/{k.limit} running" if t.kind == "concurrency"
                    else f"{k.starts}+{k.pending}/{k.limit} per {k.window_ms / 1000:g}s")
            rows.append([t.task, t.kind, k.key or "(task-wide)", used,
                         "full" if k.full else "room", k.waiting])
        if t.groups > len(t.keys):
            rows.append([t.task, t.kind, f"... {t.groups - len(t.keys)} more keys", "", "",
                         ""])
    return table(["TASK", "LIMIT", "KEY", "IN USE", "", "WAITING"], rows)


@click.command(cls=CeleryCommand, name="limits")
@click.option("--top", type=click.IntRange(1, admin_limits.TOP_MAX), default=admin_limits.TOP,
              show_default=True, help="Busiest keys shown per task and limit.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def limits(ctx: click.Context, top: int, as_json: bool) -> None:
    """Concurrency and rate-limit usage per key: running vs limit, starts in the window vs
    limit, jobs waiting behind each (the busiest keys of each task)."""
    with _admin(ctx) as admin:
        entries = admin_limits.limits(admin, top)
    if as_json:
        _emit_json([t.to_dict() for t in entries])
    else:
        _echo(limits_text(entries))


COMMANDS: tuple[click.Command, ...] = (workers, limits)
