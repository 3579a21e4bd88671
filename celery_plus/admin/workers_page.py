"""The workers table of the dashboard's ``/workers`` page: by Celery node name, with health
(``workers.py``), the jobs each holds and its last heartbeat, from the store alone."""

from __future__ import annotations

from collections.abc import Sequence

from celery_plus.admin.markup import Urls, attr, cell, e, table, token_field
from celery_plus.admin.text import age, when
from celery_plus.admin.workers import WorkerView


def _ago(now_ms: int, at_ms: int | None) -> str:
    return "-" if at_ms is None else f"{age(max(now_ms - at_ms, 0) / 1000)} ago"


def _health(v: WorkerView, now_ms: int) -> str:
    shown = v.health
    if v.lease_expired(now_ms):
        shown += ", lease expired"
    css = "ok" if v.health == "alive" and not v.lease_expired(now_ms) else "stale"
    return f'<span class="{css}" id="health-{attr(v.node or v.host)}">{e(shown)}</span>'


def _buttons(urls: Urls, v: WorkerView, token: str | None) -> str:
    if token is None or not v.node or v.health == "gone":
        return ""
    out = ""
    for action, label in (("stop", "stop taking work"), ("shutdown", "shut down")):
        if action == "stop" and not v.queues:
            continue
        out += (f'<form method="post" action="{attr(urls.workers(v.node, action))}">'
                f'{token_field(token)}<button id="{action}-{attr(v.node)}">'
                f"{e(label)}</button></form> ")
    return out


def worker_table(urls: Urls, views: Sequence[WorkerView], now_ms: int, token: str | None,
                 asked: bool) -> str:
    """Every worker: node name, health, host, pid, up since, last heartbeat, jobs held,
    queues (and, when asked, whether it answered remote control), with its actions."""
    headers = ["worker", "health", "host", "pid", "up since (UTC)", "last heartbeat",
               "jobs held", "consuming"] + (["answered"] if asked else []) + [""]
    rows = []
    for v in views:
        queues = "-" if v.queues is None else (", ".join(v.queues) or "none (stopped)")
        row = [cell(v.node or "(no record: an earlier release)"), _health(v, now_ms),
               cell(v.host or "-"), e(v.pid if v.pid is not None else "-"),
               e(when(v.started_ms) if v.started_ms else "-"),
               e(_ago(now_ms, v.last_heartbeat_ms)), e(v.jobs), cell(queues)]
        if asked:
            row.append(e("yes" if v.answered else "no"))
        rows.append([*row, _buttons(urls, v, token)])
    out = table(headers, rows, ident="workers")
    if not views:
        out += "<p>no worker record in the store, and no worker holds a job</p>"
    return out + ("<p class=\"more\">from the store: each worker's record (written every "
                  "heartbeat interval: alive within two intervals, late within six, gone "
                  "after) and the leases of the jobs it holds.</p>")
