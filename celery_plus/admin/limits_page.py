"""The dashboard's ``/limits`` page: per task, its concurrency and rate groups in use (the
busiest keys first, bounded), what each uses against its limit (``limits.py``)."""

from __future__ import annotations

from collections.abc import Sequence

from celery_plus.admin.limits import TaskLimits
from celery_plus.admin.markup import Urls, attr, cell, e, table


def _used(kind: str, used: int, limit: int, starts: int, pending: int, window_ms: int) -> str:
    if kind == "concurrency":
        return f"{used} running of {limit}"
    window = f"{window_ms / 1000:g} s"
    extra = f" (+{pending} claimed, not started)" if pending else ""
    return f"{starts} starts in {window}{extra} of {limit}"


def limits_page(urls: Urls, entries: Sequence[TaskLimits], top: int) -> str:
    if not entries:
        return ("<p>no concurrency or rate-limit group in use (none has jobs running, "
                "blocked, parked or started in its window)</p>")
    out = ""
    for t in entries:
        rows = []
        for k in t.keys:
            css = "stale" if k.full else "ok"
            waiting_word = "blocked" if t.kind == "concurrency" else "parked (window full)"
            listing = urls.jobs("blocked", task=t.task)
            rows.append([cell(k.key or "(task-wide)", 80),
                         f'<span class="{css}">'
                         f"{e(_used(t.kind, k.used, k.limit, k.starts, k.pending, k.window_ms))}"
                         "</span>",
                         e("full" if k.full else "room"),
                         f'<a href="{attr(listing)}">{e(k.waiting)} {e(waiting_word)}</a>'
                         if k.waiting else "0"])
        ident = f"limits-{t.kind}-{t.task}"
        more = (f"<p class=\"more\">the {len(t.keys)} busiest of {t.groups} keys</p>"
                if t.groups > len(t.keys) else "")
        out += (f"<h2>{e(t.task)}: {e(t.kind)}</h2>"
                + table(["key", "in use", "", "waiting"], rows, ident=ident) + more)
    return out + (f"<p class=\"more\">the {top} busiest keys of each task and limit; "
                  f'<a href="{attr(urls("/limits", top=str(min(top * 5, 1000))))}">more'
                  "</a></p>")
