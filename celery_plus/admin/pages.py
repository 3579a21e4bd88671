"""The dashboard's HTML pages (``admin/web.py`` serves them).

Rules every page follows:

* Every value put in a page goes through :func:`e` (HTML escaping, quotes included): job
  arguments, errors and queue names are untrusted input.
* Every link, form action and redirect is built by :class:`Urls`, which puts the WSGI
  ``SCRIPT_NAME`` in front, so the dashboard works mounted under a path prefix
  (``/ops/celery`` inside a Django or Flask site).
* No script: pages work with plain links and forms (the server sends a CSP allowing none).
  A form that changes jobs carries the per-process form ``token``; with ``token=None`` (no
  ``plus_admin_token``: read-only) no such form is rendered.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

from .cli import age, when
from .store import STATES, JobDetail, Page, Status, Throughput

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}
td,th{border-bottom:1px solid #ddd;padding:.25em .75em;text-align:left;vertical-align:top}
th{background:#f4f4f4}
nav a{margin-right:1em} pre{background:#f7f7f7;padding:.75em;overflow:auto}
.msg{background:#eef6ee;padding:.5em} .warn{background:#fbeaea;padding:.5em}
form{display:inline} .bulk{margin:.5em 0} .bulk button{margin-right:.5em}
"""

#: Filters of a listing that a bulk "whole filter" action honours (``text`` is not a scope).
SCOPE_FIELDS = ("task", "queue", "older_than")
#: Rows of a listing page unless ``per_page`` says otherwise.
DEFAULT_PER_PAGE = 50
#: Filters a listing takes from its query string (``search=all``: no TEXT_LIMIT).
FILTER_FIELDS = ("task", "queue", "text", "older_than", "search")
#: Records a text search of the dashboard looks at, newest first (each one is decoded).
TEXT_LIMIT = 1000
#: Bulk actions on the selected rows of a listing, per state.
SELECTED_ACTIONS: dict[str, tuple[str, ...]] = {
    "failed": ("retry", "discard", "purge"),
    "completed": ("purge",), "canceled": ("purge",), "discarded": ("purge",),
    "enqueued": ("cancel",), "scheduled": ("cancel",), "blocked": ("cancel",),
}
#: Bulk actions on every job of a listing's filter (task, queue, age), per state.
SCOPE_ACTIONS: dict[str, tuple[str, ...]] = {
    "failed": ("retry", "purge"),
    "completed": ("purge",), "canceled": ("purge",), "discarded": ("purge",),
}
#: Actions on one job, by its state.
JOB_ACTIONS: dict[str, tuple[str, ...]] = {
    "failed": ("retry", "discard"), "enqueued": ("cancel",), "scheduled": ("cancel",),
    "blocked": ("cancel",),
}


def e(value: Any) -> str:
    """``value`` as HTML text (quotes escaped too: safe inside attributes)."""
    return html.escape(str(value), quote=True)


class Urls:
    """Paths of the dashboard under its mount point (the request's ``SCRIPT_NAME``)."""

    def __init__(self, script_name: str = "") -> None:
        self.base = quote(script_name.rstrip("/"), safe="/")

    def __call__(self, path: str = "/", **query: Any) -> str:
        params = {k: v for k, v in query.items() if v not in (None, "")}
        return self.base + path + (f"?{urlencode(params)}" if params else "")

    def jobs(self, state: str, **query: Any) -> str:
        return self(f"/jobs/{quote(state, safe='')}", **query)

    def bulk(self, state: str) -> str:
        return self(f"/jobs/{quote(state, safe='')}/bulk")

    def job(self, job_id: str, action: str = "", **query: Any) -> str:
        path = f"/job/{quote(job_id, safe='')}" + (f"/{action}" if action else "")
        return self(path, **query)


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


def layout(urls: Urls, title: str, body: str) -> str:
    nav = " ".join(f'<a href="{e(urls.jobs(s))}">{e(s)}</a>' for s in STATES)
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{e(title)}</title>"
            f"<style>{_CSS}</style></head><body><nav><a href=\"{e(urls())}\">"
            f"<b>celery-plus</b></a> {nav}</nav><h1>{e(title)}</h1>{body}</body></html>")


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """``rows`` cells are HTML already (escape values before)."""
    head = "".join(f"<th>{e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _message(msg: str) -> str:
    return f'<p class="msg" id="msg">{e(msg)}</p>' if msg else ""


def _token_field(token: str) -> str:
    return f'<input type="hidden" name="token" value="{e(token)}">'


def _per_min(value: float) -> str:
    return f"{value:.1f}" if value < 10 else f"{value:.0f}"


# -- overview ------------------------------------------------------------------------------
def overview(urls: Urls, st: Status, rates: Sequence[Throughput]) -> str:
    counts = table(
        ["state", "jobs"],
        [[f'<a href="{e(urls.jobs(s))}">{e(s)}</a>', e(st.counts[s])] for s in STATES])
    throughput = table(
        ["last", "completed", "per minute", "failed", "per minute"],
        [[e(age(t.window_s)), e(t.completed), e(_per_min(t.completed_per_min)),
          e(t.failed), e(_per_min(t.failed_per_min))] for t in rates])
    now = st.now_ms
    queues = table(
        ["queue", "enqueued", "scheduled", "blocked", "running", "failed", "oldest waiting"],
        [[e(q.queue), e(q.enqueued), e(q.scheduled), e(q.blocked), e(q.running),
          f'<a href="{e(urls.jobs("failed", queue=q.queue))}">{e(q.failed)}</a>',
          e(age(None if q.oldest_waiting_ms is None else (now - q.oldest_waiting_ms) / 1000))]
         for q in st.queues])
    out = (f"<p>dead letters: <a href=\"{e(urls.jobs('failed'))}\">{e(st.dead_letters)}</a>; "
           f"oldest waiting job: {e(age(st.oldest_waiting_age_s))}</p>"
           f"<h2>Throughput</h2>{throughput}<h2>Jobs</h2>{counts}<h2>Queues</h2>{queues}")
    if st.groups:
        out += "<h2>Concurrency groups</h2>" + table(
            ["group", "running", "limit", "blocked"],
            [[e(g.group), e(g.running), e(g.limit), e(g.blocked)] for g in st.groups])
    return out


# -- listings ------------------------------------------------------------------------------
def _scope_words(scope: Mapping[str, str]) -> str:
    words = [f"task {scope['task']}" if scope.get("task") else "",
             f"queue {scope['queue']}" if scope.get("queue") else "",
             f"finished more than {scope['older_than']} ago" if scope.get("older_than") else ""]
    return ", ".join(w for w in words if w) or "every one, no filter"


def listing(urls: Urls, page: Page, filters: Mapping[str, str], msg: str,
            token: str | None) -> str:
    state = page.state
    inputs = "".join(
        f'<input name="{e(n)}" placeholder="{e(n.replace("_", " "))}" '
        f'value="{e(filters.get(n, ""))}"> ' for n in FILTER_FIELDS if n != "search")
    out = (f"{_message(msg)}<form method=\"get\" action=\"{e(urls.jobs(state))}\">{inputs}"
           "<button>filter</button></form>")
    links = []
    for number, label in ((page.page - 1, "newer"), (page.page + 1, "older")):
        if 1 <= number <= page.pages:
            per_page = page.per_page if page.per_page != DEFAULT_PER_PAGE else None
            href = urls.jobs(state, **filters, per_page=per_page, page=number)
            links.append(f'<a href="{e(href)}">{e(label)}</a>')
    out += (f"<p>{e(page.total)} jobs, page {e(page.page)} of {e(max(page.pages, 1))} "
            f"{' '.join(links)}</p>")
    if page.searched is not None:
        everything = urls.jobs(state, **{**filters, "search": "all"})
        out += (f'<p class="warn" id="searched">text searched in the newest {e(page.searched)} '
                f"{e(state)} jobs of the other filters only: narrow it with task, queue or "
                f'older than, or <a href="{e(everything)}">search them all</a> (slower)</p>')
    selectable = token is not None and bool(SELECTED_ACTIONS.get(state)) and bool(page.items)
    headers = ["task id", "task", "queue", "at (UTC)", "deliveries", "error / args"]
    rows = []
    for r in page.items:
        cells = [f'<a href="{e(urls.job(r.id))}">{e(r.id)}</a>', e(r.name), e(r.queue),
                 e(when(r.at_ms)), e(r.deliveries),
                 e(f"{r.exc_type}: {r.exc_message}" if r.exc_type else r.args_repr)]
        if selectable:
            cells.insert(0, f'<input type="checkbox" name="id" value="{e(r.id)}" '
                            f'aria-label="select {e(r.id)}">')
        rows.append(cells)
    grid = table(([""] if selectable else []) + headers, rows)
    if token is None or not selectable:
        if token is None and SELECTED_ACTIONS.get(state) and page.items:
            out += ("<p>read-only: set <code>plus_admin_token</code> to act on these jobs "
                    "from here</p>")
        return out + grid
    scope = {k: filters[k] for k in SCOPE_FIELDS if filters.get(k)}
    hidden = _token_field(token) + "".join(
        f'<input type="hidden" name="{e(k)}" value="{e(v)}">' for k, v in filters.items()
        if k in FILTER_FIELDS and v)
    buttons = "".join(
        f'<button name="do" value="{e(a)}:selected" id="bulk-{e(a)}-selected">'
        f"{e(a)} selected</button>" for a in SELECTED_ACTIONS[state])
    bulk = f'<div class="bulk">selected rows: {buttons}</div>'
    if SCOPE_ACTIONS.get(state):
        if filters.get("text"):
            bulk += ('<div class="bulk">whole filter: not with a text filter (bulk actions '
                     "take task, queue and older than)</div>")
        else:
            scoped = "".join(
                f'<button name="do" value="{e(a)}:scope" id="bulk-{e(a)}-scope">'
                f"{e(a)} all {e(page.total)}</button>" for a in SCOPE_ACTIONS[state])
            bulk += (f'<div class="bulk">whole filter ({e(_scope_words(scope))}): '
                     f"{scoped}</div>")
    return (f'{out}<form method="post" action="{e(urls.bulk(state))}" id="bulk">'
            f"{hidden}{grid}{bulk}</form>")


def confirm(urls: Urls, bulk: Bulk, matched: int, token: str) -> str:
    """The confirmation step of a bulk action: what it will do, a button that posts the same
    request with ``confirm=1``, and a way back."""
    verb = {"retry": "Retry", "discard": "Discard", "purge": "Delete for good",
            "cancel": "Cancel"}[bulk.action]
    if bulk.target == "selected":
        what = f"the {matched} selected {bulk.state} job{'s' if matched != 1 else ''}"
        listed = "<ul>" + "".join(f"<li>{e(i)}</li>" for i in bulk.ids[:50]) + "</ul>"
        if len(bulk.ids) > 50:
            listed += f"<p>... and {e(len(bulk.ids) - 50)} more</p>"
    else:
        what = (f"all {matched} {bulk.state} job{'s' if matched != 1 else ''} of this "
                f"filter ({_scope_words(bulk.scope)})")
        listed = ""
    fields = _token_field(token) + "".join(
        f'<input type="hidden" name="{e(k)}" value="{e(v)}">' for k, v in bulk.scope.items())
    fields += "".join(f'<input type="hidden" name="id" value="{e(i)}">' for i in bulk.ids)
    fields += (f'<input type="hidden" name="do" value="{e(bulk.action)}:{e(bulk.target)}">'
               '<input type="hidden" name="confirm" value="1">')
    back = urls.jobs(bulk.state, **bulk.scope)
    return (f'<p class="warn">{e(verb)} {e(what)}?</p>{listed}'
            f'<form method="post" action="{e(urls.bulk(bulk.state))}">'
            f'{fields}<button id="confirm">{e(verb.lower())}</button></form> '
            f'<a href="{e(back)}" id="back">no, go back</a>')


# -- one job -------------------------------------------------------------------------------
def job_page(urls: Urls, d: JobDetail, msg: str, token: str | None) -> str:
    s = d.summary
    facts = [("state", d.state), ("task", s.name), ("queue", s.queue),
             ("deliveries", f"{s.deliveries} of {d.max_deliveries or '-'}"),
             ("enqueued", when(s.enqueued_ms)), ("started", when(d.started_ms)),
             ("finished", when(d.finished_ms)), ("worker", d.worker or "-"),
             ("reason", s.reason or "-"),
             ("error", f"{s.exc_type}: {s.exc_message}" if s.exc_type else "-"),
             ("unique key", f"{d.unique_lock} ({d.unique_window}), held by "
                            f"{d.unique_holder or 'nobody'}" if d.unique_lock else "-")]
    out = _message(msg) + table(["", ""], [[e(k), e(v)] for k, v in facts])
    actions = JOB_ACTIONS.get(d.state, ())
    if actions and token is None:
        out += ("<p>read-only: set <code>plus_admin_token</code> to "
                f"{e(' / '.join(actions))} from here</p>")
    for action in actions if token is not None else ():
        assert token is not None
        out += (f'<form method="post" action="{e(urls.job(d.id, action))}">'
                f'{_token_field(token)}<button id="{e(action)}">{e(action)}</button></form> ')
    if d.decode_error:
        out += (f"<h2>Message</h2><p>cannot be decoded: {e(d.decode_error)}</p>"
                f"<pre>{e(d.raw_message)}</pre>")
    else:
        out += (f"<h2>Arguments</h2><pre id=\"args\">args = "
                f"{e(json.dumps(d.args, default=str))}\n"
                f"kwargs = {e(json.dumps(d.kwargs, default=str))}</pre>"
                f"<h2>Headers</h2><pre>{e(json.dumps(d.headers, indent=2, default=str))}</pre>")
    if d.history:
        out += "<h2>History</h2>" + table(
            ["#", "at (UTC)", "outcome", "worker", "error"],
            [[e(h.get("delivery", "")), e(when(h.get("finished_ms"))),
              e(h.get("outcome", "")), e(h.get("worker") or "-"),
              e(": ".join(str(x) for x in (h.get("exc_type"), h.get("exc_message")) if x))]
             for h in d.history])
    if d.traceback:
        out += f"<h2>Traceback</h2><pre>{e(d.traceback)}</pre>"
    return out
