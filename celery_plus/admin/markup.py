"""HTML building blocks of the dashboard's pages (``pages.py`` composes them).

Rules every page follows:

* Text goes through :func:`e`: HTML-escaped (quotes included) and every hidden character
  (controls, bidirectional overrides ...) shown as a boxed escape (:mod:`.text`); attribute
  values go through :func:`attr` (escaped, kept exact so that a form posts what it shows).
* Long values are cut (:func:`cell` in listings, :func:`block` on a job's page, with a link to
  the whole value), so a page costs what it shows, whatever a job holds.
* Every link, form action and redirect is built by :class:`Urls`, which puts the WSGI
  ``SCRIPT_NAME`` in front, so the dashboard works mounted under a path prefix.
* No script: links, forms and ``<meta http-equiv="refresh">`` for live pages (the server
  sends a CSP allowing no script at all).
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote, urlencode

from celery_plus.admin.text import clip, visible
from celery_plus.model.admin import COUNTED, Counts

#: Characters of one value in a listing's cell.
CELL_CHARS = 160
#: Characters of one value (arguments, headers, traceback ...) on a job's page.
BLOCK_CHARS = 20_000

CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}
td,th{border-bottom:1px solid #ddd;padding:.25em .75em;text-align:left;vertical-align:top}
td{max-width:40em;overflow-wrap:anywhere}
th{background:#f4f4f4}
nav a{margin-right:.8em} nav .live{float:right} nav .live a{margin:0 0 0 .4em}
pre{background:#f7f7f7;padding:.75em;overflow:auto;white-space:pre-wrap;overflow-wrap:anywhere}
.msg{background:#eef6ee;padding:.5em} .warn{background:#fbeaea;padding:.5em}
form{display:inline} .bulk{margin:.5em 0} .bulk button{margin-right:.5em}
.esc{border:1px solid #c99;border-radius:2px;padding:0 1px;color:#a33;font-size:90%}
.more{color:#666} .pages a,.pages b{margin-right:.4em} .stale{color:#a33}
"""


def _mark(escape: str) -> str:
    return f'<span class="esc">{escape}</span>'


def e(value: Any, keep: str = "") -> str:
    """``value`` as HTML text: escaped, hidden characters shown (``keep``: kept as is, e.g.
    the newlines of a ``<pre>``)."""
    return visible(html.escape(str(value), quote=True), keep=keep, mark=_mark)


def attr(value: Any) -> str:
    """``value`` inside a double-quoted attribute (exact: a hidden field posts it back)."""
    return html.escape(str(value), quote=True)


def cell(value: Any, limit: int = CELL_CHARS) -> str:
    """A listing's cell: one line, cut to ``limit`` characters."""
    text, left_out = clip(" ".join(str(value).split()), limit)
    return e(text) + (f'<span class="more">… ({left_out:,} more)</span>' if left_out else "")


def block(value: str, element_id: str = "", whole: str = "", limit: int = BLOCK_CHARS) -> str:
    """A ``<pre>`` of ``value`` cut to ``limit`` characters, with a link to ``whole`` (the
    URL of the full value) when it was cut."""
    text, left_out = clip(value, limit)
    ident = f' id="{attr(element_id)}"' if element_id else ""
    out = f"<pre{ident}>{e(text, keep=chr(10) + chr(9))}</pre>"
    if left_out:
        out += (f'<p class="more">{left_out:,} more characters not shown: '
                f'<a href="{attr(whole)}">the whole value</a> (plain text)</p>')
    return out


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
        """A job's page (or an action on it). An id that a browser would take for a path
        segment of its own (``.``, ``..``, empty) goes in the query string instead."""
        if job_id in ("", ".", ".."):
            return self("/job" + (f"/{action}" if action else ""), id=job_id, **query)
        path = f"/job/{quote(job_id, safe='')}" + (f"/{action}" if action else "")
        return self(path, **query)

    def schedules(self, name: str = "", action: str = "") -> str:
        if not name:
            return self("/schedules")
        return self(f"/schedules/{quote(name, safe='')}/{action}")

    def queues(self, name: str, action: str) -> str:
        return self(f"/queues/{quote(name, safe='')}/{action}")

    def workers(self, node: str = "", action: str = "") -> str:
        if not node:
            return self("/workers")
        return self(f"/workers/{quote(node, safe='')}/{action}")


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], ident: str = "") -> str:
    """``rows`` cells are HTML already (escape values before)."""
    head = "".join(f"<th>{e(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    ident = f' id="{attr(ident)}"' if ident else ""
    return f"<table{ident}><tr>{head}</tr>{body}</table>"


def message(msg: str) -> str:
    return f'<p class="msg" id="msg">{e(msg)}</p>' if msg else ""


def token_field(token: str) -> str:
    return f'<input type="hidden" name="token" value="{attr(token)}">'


def hidden_fields(values: Mapping[str, str]) -> str:
    return "".join(f'<input type="hidden" name="{attr(k)}" value="{attr(v)}">'
                   for k, v in values.items() if v)


#: Live refresh choices (seconds; 0: off).
REFRESH_CHOICES = (0, 5, 30)


Live = tuple[int, str, Sequence[tuple[int, str]]]


def layout(urls: Urls, title: str, body: str, counts: Counts | None = None,
           live: Live | None = None, logout_token: str | None = None) -> str:
    """A whole page. ``counts`` label the navigation's states; ``live`` is (refresh seconds,
    the page's URL to reload, (seconds, URL) of each refresh choice): a ``<meta refresh>``
    reloads the page (no script needed); ``logout_token``: an operator's page, with a log-out
    button."""
    # (reserved jobs are listed with the running ones, marked)
    nav = " ".join(
        f'<a href="{attr(urls.jobs("running" if s == "reserved" else s))}" id="nav-{s}">{e(s)}'
        + (f" ({counts[s]:,})" if counts is not None else "") + "</a>" for s in COUNTED)
    nav += f' <a href="{attr(urls.workers())}" id="nav-workers">workers</a>'
    nav += f' <a href="{attr(urls("/limits"))}" id="nav-limits">limits</a>'
    nav += f' <a href="{attr(urls.schedules())}" id="nav-schedules">schedules</a>'
    nav += f' <a href="{attr(urls("/errors"))}" id="nav-errors">errors</a>'
    nav += f' <a href="{attr(urls("/tasks"))}" id="nav-tasks">tasks</a>'
    nav += f' <a href="{attr(urls("/history"))}" id="nav-history">history</a>'
    head = ""
    if live is not None:
        seconds, reload_url, choices = live
        if seconds:
            head = f'<meta http-equiv="refresh" content="{seconds};url={attr(reload_url)}">'
        links = " ".join(
            f"<b>{_live_label(value)}</b>" if value == seconds else
            f'<a href="{attr(url)}" id="live-{value}">{_live_label(value)}</a>'
            for value, url in choices)
        nav += f' <span class="live">live: {links}</span>'
    if logout_token is not None:
        nav += (f' <form method="post" action="{attr(urls("/logout"))}">'
                f'{token_field(logout_token)}<button id="logout">log out</button></form>')
    # (a <title> holds text only: its hidden characters are spelled out, not boxed in markup)
    return (f"<!doctype html><html><head><meta charset='utf-8'>{head}"
            f"<title>{html.escape(visible(title))}</title>"
            f"<style>{CSS}</style></head><body><nav><a href=\"{attr(urls())}\">"
            f"<b>celery-plus</b></a> {nav}</nav><h1>{e(title)}</h1>{body}</body></html>")


def _live_label(seconds: int) -> str:
    return f"{seconds}s" if seconds else "off"


def page_numbers(current: int, last: int) -> list[int | None]:
    """Page numbers to link: the first, the last, and two either side of ``current``
    (None: a gap)."""
    wanted = sorted({1, last, *range(max(current - 2, 1), min(current + 2, last) + 1)})
    out: list[int | None] = []
    for number in wanted:
        if out and number - (out[-1] or 0) > 1:
            out.append(None)
        out.append(number)
    return out
