"""The dashboard's pages (``admin/web.py`` serves them; building blocks in ``markup.py``).

A form that changes anything carries the form token of the operator's browser session; with
``token=None`` (a reader, or no ``plus_admin_token``: read-only) no such form is rendered.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from celery_plus.admin.api import TaskResult
from celery_plus.admin.charts import activity_svg
from celery_plus.admin.cuts import WALK_WINDOW, cuts, unindexed_note
from celery_plus.admin.job_states import reserved_mark, shown_state
from celery_plus.admin.markup import (
    REFRESH_CHOICES,
    Urls,
    attr,
    block,
    cell,
    e,
    hidden_fields,
    message,
    page_numbers,
    table,
    token_field,
)
from celery_plus.admin.schedules import Schedule
from celery_plus.admin.search import TEXT_WINDOW
from celery_plus.admin.text import age, visible, when
from celery_plus.admin.workers import WorkerView
from celery_plus.admin.workers_page import worker_table
from celery_plus.model.admin import (
    COUNTED,
    Activity,
    JobDetail,
    Page,
    QueueLatency,
    Status,
    Throughput,
)
from celery_plus.model.capped import count_text

#: Filters of a listing that a bulk "whole filter" action honours (all but ``search``: a whole
#: filter action searches every job).
SCOPE_FIELDS = ("task", "queue", "older_than", "text", "since", "until")
#: Of those, the ones the store's scoped retry / purge take (others: admin/filter_actions.py).
STORE_SCOPE_FIELDS = ("task", "queue", "older_than")
#: Rows of a listing page unless ``per_page`` says otherwise.
DEFAULT_PER_PAGE = 50
#: Filters a listing takes from its query string (``search=all``: no TEXT_LIMIT;
#: ``walk=all``: no WALK_LIMIT).
FILTER_FIELDS = ("task", "queue", "text", "older_than", "since", "until", "search", "walk")
#: Of those, the switches that lift a bound (admin/cuts.py), not typed in the filter form.
SWITCH_FIELDS = ("search", "walk")
#: Records a text search of the dashboard looks at, first in the listing's order (the CLI's
#: default window too).
TEXT_LIMIT = TEXT_WINDOW
#: Waiting jobs a walk of the dashboard looks at (admin/cuts.py; the CLI's default too).
WALK_LIMIT = WALK_WINDOW
#: The overview chart's time ranges: name -> (seconds, buckets).
RANGES = {"1h": (3600, 60), "6h": (21600, 72), "24h": (86400, 96), "7d": (604800, 84)}
DEFAULT_RANGE = "1h"
#: Bulk actions on the selected rows of a listing, per state.
SELECTED_ACTIONS: dict[str, tuple[str, ...]] = {
    "failed": ("retry", "discard", "purge"),
    "completed": ("purge",), "canceled": ("purge",), "discarded": ("purge",),
    "enqueued": ("cancel",), "scheduled": ("cancel",), "blocked": ("cancel",),
}
#: Bulk actions on every job of a listing's filter, per state.
SCOPE_ACTIONS: dict[str, tuple[str, ...]] = {
    "failed": ("retry", "discard", "purge"),
    "completed": ("purge",), "canceled": ("purge",), "discarded": ("purge",),
    "enqueued": ("cancel",), "scheduled": ("cancel",), "blocked": ("cancel",),
}
#: Actions on one job, by its state (``terminate``: Celery's revoke with terminate).
JOB_ACTIONS: dict[str, tuple[str, ...]] = {
    "failed": ("retry", "discard"), "enqueued": ("cancel",), "scheduled": ("cancel",),
    "blocked": ("cancel",), "running": ("terminate",),
}
#: Raw values of a job a page links to (``?raw=``).
RAW_FIELDS = ("args", "kwargs", "headers", "traceback", "message", "error", "result")


@dataclass(frozen=True)
class Bulk:
    """A bulk action asked for on a listing: ``target`` is ``selected`` (the ``ids``) or
    ``scope`` (every job of the state in the ``scope`` filters)."""

    state: str
    action: str
    target: str
    ids: tuple[str, ...]
    scope: Mapping[str, str]

    @property
    def needs_confirmation(self) -> bool:
        """Destructive actions, and any action on a whole filter, are confirmed first."""
        return self.action in ("discard", "purge", "cancel") or self.target == "scope"


@dataclass(frozen=True)
class ListingView:
    """What a listing page shows: its filters, order, page and refresh (its links keep
    them)."""

    state: str
    filters: Mapping[str, str] = field(default_factory=dict)
    sort: str = "newest"
    page: int = 1
    per_page: int = DEFAULT_PER_PAGE
    refresh: int = 0

    def query(self, **changes: Any) -> dict[str, Any]:
        extra = {k: changes.pop(k) for k in ("select",) if k in changes}
        view = replace(self, **changes)
        return {**view.filters, "sort": None if view.sort == "newest" else view.sort,
                "per_page": None if view.per_page == DEFAULT_PER_PAGE else view.per_page,
                "page": None if view.page == 1 else view.page,
                "refresh": view.refresh or None, **extra}


def live(urls_of: Any, seconds: int) -> tuple[int, str, list[tuple[int, str]]]:
    """The ``layout`` live argument of a page whose URL with refresh ``n`` is
    ``urls_of(n)``."""
    return seconds, urls_of(seconds), [(n, urls_of(n)) for n in REFRESH_CHOICES]


def _per_min(value: float) -> str:
    return f"{value:.1f}" if value < 10 else f"{value:.0f}"


def _seconds(value: float) -> str:
    return f"{value:.1f} s" if value < 60 else age(value)


def num(count: int) -> str:
    """A count as HTML text (a capped one as ``10000+``: admin/capped.py)."""
    return e(count_text(count))


# -- overview ------------------------------------------------------------------------------
def _pause_cell(urls: Urls, name: str, paused: Mapping[str, int], token: str | None) -> str:
    """A queue's state (paused since when, or active) and its pause / resume button."""
    state = (f'<span class="stale">paused</span> since {e(when(paused[name]))}'
             if name in paused else "active")
    if token is None:
        return state
    action = "resume" if name in paused else "pause"
    return (f'{state} <form method="post" action="{attr(urls.queues(name, action))}">'
            f'{token_field(token)}<button id="{action}-queue-{attr(visible(name))}">{e(action)}'
            "</button></form>")


def overview(urls: Urls, st: Status, rates: Sequence[Throughput], activity: Activity,
             latency: Sequence[QueueLatency], range_key: str, refresh: int,
             paused: Mapping[str, int] | None = None, token: str | None = None,
             msg: str = "") -> str:
    ranges = " ".join(
        f"<b>{e(name)}</b>" if name == range_key else
        f'<a href="{attr(urls("/", range=name, refresh=refresh or None))}" '
        f'id="range-{attr(name)}">{e(name)}</a>' for name in RANGES)
    chart = (f"<h2>Completed and failed</h2><p>last {ranges} "
             '(<span style="color:#3a8d3a">&#9632;</span> completed, '
             '<span style="color:#c23b3b">&#9632;</span> failed, per '
             f"{e(age(activity.bucket_s))})</p>{activity_svg(activity)}")
    throughput = table(
        ["last", "completed", "per minute", "failed", "per minute"],
        [[e(age(t.window_s)), e(t.completed), e(_per_min(t.completed_per_min)),
          e(t.failed), e(_per_min(t.failed_per_min))] for t in rates], ident="throughput")
    counts = table(
        ["state", "jobs"],
        [[f'<a href="{attr(urls.jobs("running" if s == "reserved" else s))}">{e(s)}</a>',
          num(st.counts[s])] for s in COUNTED], ident="counts")
    now = st.now_ms
    waits = {q.queue: q for q in latency}
    paused = paused or {}
    names = sorted({q.queue for q in st.queues} | set(waits) | set(paused))
    by_name = {q.queue: q for q in st.queues}
    rows = []
    for name in names:
        q, w = by_name.get(name), waits.get(name)
        rows.append([
            cell(name), *(num(getattr(q, s) if q else 0)
                          for s in ("enqueued", "scheduled", "blocked", "running",
                                    "reserved")),
            f'<a href="{attr(urls.jobs("failed", queue=name))}">{num(q.failed if q else 0)}</a>',
            e(age(None if q is None or q.oldest_waiting_ms is None
                  else (now - q.oldest_waiting_ms) / 1000)),
            e(_seconds(w.p50_s)) if w else "-", e(_seconds(w.p95_s)) if w else "-",
            e(w.samples) if w else "0", _pause_cell(urls, name, paused, token)])
    queues = table(["queue", "enqueued", "scheduled", "blocked", "running", "reserved", "failed",
                    "oldest waiting", "wait p50", "wait p95", "started (1 h)", "state"], rows,
                   ident="queues")
    out = (f"{message(msg)}<p>dead letters: <a href=\"{attr(urls.jobs('failed'))}\">"
           f"{num(st.dead_letters)}</a>; oldest waiting job: "
           f"{e(age(st.oldest_waiting_age_s))}</p>{chart}"
           f"<h2>Throughput</h2>{throughput}<h2>Queues</h2>{queues}{_unindexed(st)}"
           "<p class=\"more\">wait: from enqueued (or due) to started, of the jobs started "
           "in the last hour (the newest 5,000); a paused queue's jobs are claimed by no "
           "worker until it is resumed (running ones finish, new ones wait); "
           f'<a href="{attr(urls("/history"))}" id="history-link">depth and wait over '
           "time</a></p>"
           f"<h2>Jobs</h2>{counts}")
    if st.groups:
        out += "<h2>Concurrency groups</h2>" + table(
            ["group", "running", "limit", "blocked"],
            [[cell(g.group), e(g.running), e(g.limit), e(g.blocked)] for g in st.groups])
    return out


def _unindexed(st: Status) -> str:
    note = unindexed_note(st.unindexed)
    return f'<p class="warn" id="unindexed">{e(note)}</p>' if note else ""


# -- listings ------------------------------------------------------------------------------
def _scope_words(scope: Mapping[str, str]) -> str:
    words = [f"task {scope['task']}" if scope.get("task") else "",
             f"queue {scope['queue']}" if scope.get("queue") else "",
             f"finished more than {scope['older_than']} ago" if scope.get("older_than") else "",
             f"text {scope['text']!r}" if scope.get("text") else "",
             f"since {scope['since']}" if scope.get("since") else "",
             f"until {scope['until']}" if scope.get("until") else ""]
    return ", ".join(w for w in words if w) or "every one, no filter"


def _pager(urls: Urls, page: Page, view: ListingView) -> str:
    last = max(page.pages, 1)
    parts = []
    for number in page_numbers(page.page, last):
        if number is None:
            parts.append("…")
        elif number == page.page:
            parts.append(f"<b>{number}</b>")
        else:
            parts.append(f'<a href="{attr(urls.jobs(view.state, **view.query(page=number)))}" '
                         f'id="page-{number}">{number}</a>')
    for number, label in ((page.page - 1, "newer" if view.sort == "newest" else "older"),
                          (page.page + 1, "older" if view.sort == "newest" else "newer")):
        if 1 <= number <= page.pages:
            href = urls.jobs(view.state, **view.query(page=number))
            parts.append(f'<a href="{attr(href)}">{e(label)}</a>')
    return f'<p class="pages" id="pages">{num(page.total)} jobs, page {e(page.page)} of ' \
           f'{e(last)}{"+" if page.capped else ""}: {" ".join(parts)}</p>'


def _filter_form(urls: Urls, view: ListingView) -> str:
    labels = {"older_than": "older than (15m, 2h)", "since": "since (2h or ISO time)",
              "until": "until (15m or ISO time)"}
    inputs = "".join(
        f'<input name="{attr(n)}" placeholder="{attr(labels.get(n, n))}" '
        f'value="{attr(view.filters.get(n, ""))}"> '
        for n in FILTER_FIELDS if n not in SWITCH_FIELDS)
    sorts = "".join(f'<option value="{s}"{" selected" if s == view.sort else ""}>{s} first'
                    "</option>" for s in ("newest", "oldest"))
    keep = hidden_fields({"per_page": str(view.per_page) if view.per_page != DEFAULT_PER_PAGE
                          else "", "refresh": str(view.refresh or "")})
    return (f'<form method="get" action="{attr(urls.jobs(view.state))}" id="filter">{inputs}'
            f'<select name="sort" aria-label="order">{sorts}</select> {keep}'
            "<button>filter</button></form>")


def _search_notes(urls: Urls, page: Page, view: ListingView) -> str:
    """What a search found besides its rows: the job with that id, the task names with that
    text, each a link to the same search in that task's jobs (the task's newest jobs, read
    from an index: its whole listing sorts every job of the task by time, seconds at a
    million)."""
    out = ""
    if page.by_id:
        out += '<p id="by-id">the job with this id</p>'
    if page.task_names:
        links = " ".join(
            f'<a href="{attr(urls.jobs(view.state, **{**view.query(page=1), "task": name}))}">'
            f"{cell(name, 80)}</a>" for name in page.task_names)
        out += f'<p id="task-names">tasks whose name contains it: {links}</p>'
    return out


def listing(urls: Urls, page: Page, view: ListingView, msg: str, token: str | None,
            read_only: bool, select_all: bool = False) -> str:
    """A listing page; ``select_all``: every row's box ticked (the *select all on this page*
    link: no script runs here)."""
    state, filters = page.state, view.filters
    out = message(msg) + _filter_form(urls, view) + _pager(urls, page, view)
    for cut in cuts(page):
        name, value = cut.param
        everything = urls.jobs(state, **{**view.query(page=1), name: value})
        out += (f'<p class="warn" id="{attr(cut.ident)}">{e(cut.said)}: {e(cut.narrow)}, or '
                f'<a href="{attr(everything)}">{e(cut.lift)}</a> (slower)</p>')
    out += _search_notes(urls, page, view)
    selectable = token is not None and bool(SELECTED_ACTIONS.get(state)) and bool(page.items)
    headers = ["task id", "task", "queue", "at (UTC)", "deliveries", "error / args"]
    rows = []
    for r in page.items:
        shown = f"{r.exc_type}: {r.exc_message}" if r.exc_type else r.args_repr
        cells = [f'<a href="{attr(urls.job(r.id))}">{cell(r.id, 80)}</a>', cell(r.name, 80),
                 cell(r.queue, 60), e(when(r.at_ms)) + reserved_mark(r), e(r.deliveries),
                 cell(shown)]
        if selectable:
            ticked = " checked" if select_all else ""
            cells.insert(0, f'<input type="checkbox" name="id" value="{attr(r.id)}" '
                            f'aria-label="select {attr(r.id)}"{ticked}>')
        rows.append(cells)
    grid = table(([""] if selectable else []) + headers, rows, ident="jobs")
    if not selectable:
        if read_only and SELECTED_ACTIONS.get(state) and page.items:
            out += ("<p>read-only: set <code>plus_admin_token</code> to act on these jobs "
                    "from here</p>")
        return out + grid
    assert token is not None
    scope = {k: filters[k] for k in SCOPE_FIELDS if filters.get(k)}
    hidden = token_field(token) + hidden_fields(
        {k: v for k, v in filters.items() if k in FILTER_FIELDS})
    buttons = "".join(
        f'<button name="do" value="{attr(a)}:selected" id="bulk-{attr(a)}-selected">'
        f"{e(a)} selected</button>" for a in SELECTED_ACTIONS[state])
    here = view.query(select=None if select_all else "all")
    pick = (f'<a href="{attr(urls.jobs(state, **here))}" '
            f'id="{"select-none" if select_all else "select-all"}">'
            f'{"clear the selection" if select_all else "select all on this page"}</a>')
    bulk = f'<div class="bulk">{pick} · selected rows: {buttons}</div>'
    if SCOPE_ACTIONS.get(state):
        scoped = "".join(
            f'<button name="do" value="{attr(a)}:scope" id="bulk-{attr(a)}-scope">'
            f"{e(a)} all {'matches' if cuts(page) else num(page.total)}"
            "</button>" for a in SCOPE_ACTIONS[state])
        bulk += (f'<div class="bulk">every job of this filter ({e(_scope_words(scope))}): '
                 f"{scoped}</div>")
    return (f'{out}<form method="post" action="{attr(urls.bulk(state))}" id="bulk">'
            f"{hidden}{grid}{bulk}</form>")


def confirm(urls: Urls, bulk: Bulk, matched: int, token: str) -> str:
    """The confirmation step of a bulk action: what it will do, a button that posts the same
    request with ``confirm=1``, and a way back."""
    verb = {"retry": "Retry", "discard": "Discard", "purge": "Delete for good",
            "cancel": "Cancel"}[bulk.action]
    if bulk.target == "selected":
        what = f"the {matched} selected {bulk.state} job{'s' if matched != 1 else ''}"
        listed = "<ul>" + "".join(f"<li>{cell(i, 80)}</li>" for i in bulk.ids[:50]) + "</ul>"
        if len(bulk.ids) > 50:
            listed += f"<p>... and {e(len(bulk.ids) - 50)} more</p>"
    else:
        what = (f"all {count_text(matched)} {bulk.state} job{'s' if matched != 1 else ''} of this "
                f"filter ({_scope_words(bulk.scope)})")
        listed = ""
    fields = token_field(token) + hidden_fields(bulk.scope)
    fields += "".join(f'<input type="hidden" name="id" value="{attr(i)}">' for i in bulk.ids)
    fields += (f'<input type="hidden" name="do" value="{attr(bulk.action)}:'
               f'{attr(bulk.target)}"><input type="hidden" name="confirm" value="1">')
    back = urls.jobs(bulk.state, **bulk.scope)
    return (f'<p class="warn">{e(verb)} {e(what)}?</p>{listed}'
            f'<form method="post" action="{attr(urls.bulk(bulk.state))}">'
            f'{fields}<button id="confirm">{e(verb.lower())}</button></form> '
            f'<a href="{attr(back)}" id="back">no, go back</a>')


def confirm_action(question: str, detail: str, action_url: str, token: str, button: str,
                   back_url: str) -> str:
    """The confirmation step of one action (stop a job, stop or shut down a worker)."""
    return (f'<p class="warn" id="question">{e(question)}</p><p>{e(detail)}</p>'
            f'<form method="post" action="{attr(action_url)}">{token_field(token)}'
            '<input type="hidden" name="confirm" value="1">'
            f'<button id="confirm">{e(button)}</button></form> '
            f'<a href="{attr(back_url)}" id="back">no, go back</a>')


# -- one job -------------------------------------------------------------------------------
def _runtime(d: JobDetail, now_ms: int) -> str:
    if d.started_ms and d.finished_ms and d.state in ("completed", "failed"):
        return _seconds(max(d.finished_ms - d.started_ms, 0) / 1000)
    if d.started_ms and d.state == "running":
        verb = "reserved (not started) for" if d.summary.reserved else "running for"
        return f"{verb} {_seconds(max(now_ms - d.started_ms, 0) / 1000)}"
    return "-"


def _result_facts(urls: Urls, d: JobDetail, result: TaskResult | None) -> str:
    if result is None:
        return "<h2>Result</h2><p>no result backend</p>"
    if result.error:
        return f"<h2>Result</h2><p class=\"warn\">{e(result.error)}</p>"
    facts = table(["", ""], [[e("state"), f'<span id="result-state">{e(result.state)}</span>'],
                             [e("stored (UTC)"), e(result.date_done or "-")]])
    value = block(result.result or "-", "result", urls.job(d.id, raw="result"))
    return f"<h2>Result</h2>{facts}{value}"


def job_page(urls: Urls, d: JobDetail, msg: str, token: str | None, read_only: bool,
             result: TaskResult | None, now_ms: int) -> str:
    s = d.summary
    error = f"{s.exc_type}: {s.exc_message}" if s.exc_type else "-"
    facts = [("state", e(shown_state(d))), ("task", cell(s.name)), ("queue", cell(s.queue)),
             ("deliveries", e(f"{s.deliveries} of {d.max_deliveries or '-'}")),
             ("enqueued", e(when(s.enqueued_ms))), ("started", e(when(d.started_ms))),
             ("finished", e(when(d.finished_ms))), ("runtime", e(_runtime(d, now_ms))),
             ("worker", cell(d.worker or "-")), ("reason", cell(s.reason or "-")),
             ("error", cell(error, 2000) + (
                 f' <a href="{attr(urls.job(d.id, raw="error"))}">whole error</a>'
                 if len(error) > 2000 else "")),
             ("unique key", cell(f"{d.unique_lock} ({d.unique_window}), held by "
                                 f"{d.unique_holder or 'nobody'}" if d.unique_lock else "-"))]
    out = message(msg) + table(["", ""], [[e(k), v] for k, v in facts], ident="facts")
    actions = JOB_ACTIONS.get(d.state, ())
    if actions and token is None and read_only:
        out += ("<p>read-only: set <code>plus_admin_token</code> to "
                f"{e(' / '.join(actions))} from here</p>")
    for action in actions if token is not None else ():
        assert token is not None
        label = "stop it (terminate)" if action == "terminate" else action
        out += (f'<form method="post" action="{attr(urls.job(d.id, action))}">'
                f'{token_field(token)}<button id="{attr(action)}">{e(label)}</button></form> ')
    out += _result_facts(urls, d, result)
    if d.decode_error:
        out += (f"<h2>Message</h2><p>cannot be decoded: {e(d.decode_error)}</p>"
                + block(d.raw_message, "raw", urls.job(d.id, raw="message")))
    else:
        out += ("<h2>Arguments</h2>"
                + block(f"args = {json.dumps(d.args, default=str)}\n"
                        f"kwargs = {json.dumps(d.kwargs, default=str)}", "args",
                        urls.job(d.id, raw="args"))
                + "<h2>Headers</h2>"
                + block(json.dumps(d.headers, indent=2, default=str), "headers",
                        urls.job(d.id, raw="headers")))
    if d.history:
        out += "<h2>History</h2>" + table(
            ["#", "at (UTC)", "outcome", "worker", "error"],
            [[e(h.get("delivery", "")), e(when(h.get("finished_ms"))),
              cell(h.get("outcome", "")), cell(h.get("worker") or "-"),
              cell(": ".join(str(x) for x in (h.get("exc_type"), h.get("exc_message")) if x))]
             for h in d.history[-100:]])
        if len(d.history) > 100:
            out += f'<p class="more">the last 100 of {len(d.history)} entries</p>'
    if d.traceback:
        out += "<h2>Traceback</h2>" + block(d.traceback, "traceback",
                                            urls.job(d.id, raw="traceback"))
    return out


def raw_value(d: JobDetail, name: str, result: TaskResult | None) -> str:
    """The whole of one of a job's values (``RAW_FIELDS``), as plain text."""
    s = d.summary
    if name == "args":
        return json.dumps(d.args, default=str, indent=2)
    if name == "kwargs":
        return json.dumps(d.kwargs, default=str, indent=2)
    if name == "headers":
        return json.dumps(d.headers, default=str, indent=2)
    if name == "traceback":
        return d.traceback
    if name == "message":
        return d.raw_message
    if name == "error":
        return f"{s.exc_type}: {s.exc_message}" if s.exc_type else s.exc_message
    if name == "result":
        return result.result if result is not None else ""
    raise ValueError(f"raw: one of {', '.join(RAW_FIELDS)}")


# -- workers -------------------------------------------------------------------------------
def workers_page(urls: Urls, views: Sequence[WorkerView], now_ms: int, msg: str,
                 token: str | None, control: bool, asked: bool = False) -> str:
    out = message(msg) + worker_table(urls, views, now_ms, token, asked)
    if control:
        out += (f'<p><a href="{attr(urls("/workers", ask="1"))}" id="ask-workers">ask the '
                "workers now</a> (one remote-control broadcast: who answers within 1 s, and "
                "the queues each consumes now)</p>")
    else:
        out += ("<p>remote control is not available here (the dashboard was given a broker "
                "URL, not the Celery app)</p>")
    return out


# -- schedules ------------------------------------------------------------------------------
def schedules_page(urls: Urls, entries: Sequence[Schedule], msg: str,
                   token: str | None) -> str:
    rows = []
    for s in entries:
        button = ""
        if token is not None:
            action = "resume" if s.paused else "pause"
            button = (f'<form method="post" action="{attr(urls.schedules(s.name, action))}">'
                      f'{token_field(token)}<button id="{action}-{attr(s.name)}">'
                      f"{e(action)}</button></form>")
        state = '<span class="stale">paused</span>' if s.paused else "active"
        last_job = (f'<a href="{attr(urls.job(s.last_job_id))}">{e(s.last_job_id)}</a>'
                    if s.last_job_id else "-")
        rows.append([cell(s.name), cell(s.task), cell(s.schedule), state,
                     e(when(s.last_due_ms or None)), e(when(s.next_due_ms or None)),
                     e(s.fired), last_job, button])
    out = message(msg) + table(["schedule", "task", "every", "state", "last tick (UTC)",
                                "next tick (UTC)", "fired", "last job", ""], rows,
                               ident="schedules")
    if not entries:
        out += "<p>no schedule entries in the store: beat registers them when it starts</p>"
    out += ("<p class=\"more\">entries of Celery's beat_schedule, kept in the store by "
            "celery-plus beat; a paused entry's ticks pass without jobs until it is resumed "
            "(they are not run later).</p>")
    return out
