"""A minimal web dashboard for the admin: a WSGI application on the standard library only.

``make_app(app)`` returns a WSGI callable over :mod:`celery_plus.admin.api` (and nothing
else); ``celery-plus dashboard -A proj`` serves it with :mod:`wsgiref` on 127.0.0.1:8055.

Pages (HTML; every value escaped):
  ``/``                     counts per state, per-queue status, concurrency groups
  ``/jobs/<state>``         a listing, newest first (``?task=&queue=&text=&page=``)
  ``/job/<task id>``        the job: message, history, traceback; buttons for the operations
  ``/failed``               short for ``/jobs/failed``
JSON (same data as the CLI's ``--json``): ``/api/status``, ``/api/jobs/<state>``,
``/api/job/<task id>``. ``/metrics``: Prometheus text format (job counts by queue and state,
dead letters, the store's recovery / dedup / block counters).

Operations: ``POST /job/<task id>/<retry|discard|cancel>``; answered with a redirect to the
job (``?msg=`` says what happened), 404 for an unknown job or page, 409 for a retry conflict.
Every POST needs both:

* the admin token, the ``plus_admin_token`` setting (or ``make_app(..., admin_token=)``): the
  password of HTTP Basic auth (any user name) or ``Authorization: Bearer <token>``. Without
  the setting every POST is refused (403, naming the setting): the dashboard is read-only;
  with it, a POST without the right credentials gets 401 and a Basic-auth challenge;
* the form's ``token`` (a per-process secret that guards against cross-site posts; 403).

GET pages (and ``/metrics``) need no credentials: bind to localhost (the default) or put the
dashboard behind your authenticating proxy. Every value put in a page (job arguments and
errors are untrusted) goes through :func:`_e` (HTML escaping, quotes included); pages are
sent with a Content-Security-Policy that allows no script at all.
"""

from __future__ import annotations

import base64
import binascii
import html
import json
import secrets
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import parse_qs, quote, urlencode

from .. import settings
from . import api
from .cli import age, when
from .store import STATES, JobNotFound, Page, RetryConflict, Status

StartResponse = Callable[..., Any]
Environ = dict[str, Any]

_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222}
table{border-collapse:collapse;margin:.5em 0 1.5em}
td,th{border-bottom:1px solid #ddd;padding:.25em .75em;text-align:left;vertical-align:top}
th{background:#f4f4f4}
nav a{margin-right:1em} pre{background:#f7f7f7;padding:.75em;overflow:auto}
.msg{background:#eef6ee;padding:.5em} form{display:inline}
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


#: Sent with every response: no script, no framing, forms post to this origin only.
_SECURITY_HEADERS = [
    ("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; "
                                "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Referrer-Policy", "no-referrer"),
    ("Cache-Control", "no-store"),
]

_LOOPBACK = ("127.0.0.1", "::1", "localhost")


def _configured_token(target: Any) -> str | None:
    """``plus_admin_token`` of a Celery app (None for a URL or an app without it)."""
    conf = getattr(target, "conf", None)
    if conf is None:
        return None
    token = settings.resolve({"plus_admin_token": conf.get("plus_admin_token")}).admin_token
    return str(token) if token else None


def _presented_token(environ: Environ) -> str | None:
    """The secret of the request's ``Authorization`` header (Bearer, or Basic's password)."""
    header = str(environ.get("HTTP_AUTHORIZATION") or "")
    scheme, _, value = header.partition(" ")
    value = value.strip()
    if scheme.lower() == "bearer":
        return value or None
    if scheme.lower() == "basic":
        try:
            decoded = base64.b64decode(value, validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return None
        return decoded.partition(":")[2] or None
    return None


class Dashboard:
    """The WSGI application (see the module docstring)."""

    def __init__(self, target: Any, admin_token: str | None = None) -> None:
        self.target = target
        self.admin_token = (settings.resolve({"plus_admin_token": admin_token}).admin_token
                            if admin_token is not None else _configured_token(target))
        self.token = secrets.token_urlsafe(24)
        self._lock = threading.Lock()
        self._admin: api.Admin | None = None

    # -- plumbing ---------------------------------------------------------------------------
    def admin(self) -> api.Admin:
        with self._lock:
            if self._admin is None:
                self._admin = api.connect(self.target)
            return self._admin

    def close(self) -> None:
        with self._lock:
            if self._admin is not None:
                self._admin.close()
                self._admin = None

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        method = environ.get("REQUEST_METHOD", "GET")
        path = environ.get("PATH_INFO", "/") or "/"
        query = {k: v[-1] for k, v in parse_qs(environ.get("QUERY_STRING", "")).items()}
        parts = [p for p in path.split("/") if p]
        try:
            if method == "POST":
                return self._post(environ, parts, start_response)
            if method != "GET":
                return self._reply(start_response, "405 Method Not Allowed", "method not allowed")
            return self._get(parts, query, start_response)
        except JobNotFound as exc:
            return self._reply(start_response, "404 Not Found", str(exc))
        except ValueError as exc:
            return self._reply(start_response, "400 Bad Request", str(exc))

    def _get(self, parts: list[str], query: dict[str, str],
             start_response: StartResponse) -> Iterable[bytes]:
        admin = self.admin()
        if not parts:
            return self._html(start_response, "celery-plus", self._status_html(admin.status()))
        if parts[0] == "api" and len(parts) >= 2:
            if parts[1] == "status" and len(parts) == 2:
                return self._json(start_response, admin.status().to_dict())
            if parts[1] == "jobs" and len(parts) == 3:
                return self._json(start_response, self._page(parts[2], query).to_dict())
            if parts[1] == "job" and len(parts) == 3:
                return self._json(start_response, admin.show(parts[2]).to_dict())
        if parts == ["metrics"]:
            return self._metrics(admin, start_response)
        if parts == ["failed"]:
            parts = ["jobs", "failed"]
        if parts[0] == "jobs" and len(parts) == 2:
            page = self._page(parts[1], query)
            return self._html(start_response, f"{parts[1]} jobs", self._page_html(page, query))
        if parts[0] == "job" and len(parts) == 2:
            return self._html(start_response, f"job {parts[1]}",
                              self._job_html(parts[1], query.get("msg", "")))
        return self._reply(start_response, "404 Not Found", "no such page")

    def _page(self, state: str, query: dict[str, str]) -> Page:
        return self.admin().jobs(state, task=query.get("task") or None,
                                 queue=query.get("queue") or None,
                                 text=query.get("text") or None,
                                 page=int(query.get("page") or 1),
                                 per_page=int(query.get("per_page") or 50))

    def _post(self, environ: Environ, parts: list[str],
              start_response: StartResponse) -> Iterable[bytes]:
        refused = self._authenticate(environ, start_response)
        if refused is not None:
            return refused
        length = int(environ.get("CONTENT_LENGTH") or 0)
        if length > 65536:
            return self._reply(start_response, "413 Content Too Large", "form too large")
        body = environ["wsgi.input"].read(length).decode() if length else ""
        form = {k: v[-1] for k, v in parse_qs(body).items()}
        if not secrets.compare_digest(form.get("token", "").encode(), self.token.encode()):
            return self._reply(start_response, "403 Forbidden", "missing or wrong form token")
        if len(parts) != 3 or parts[0] != "job" or parts[2] not in ("retry", "discard",
                                                                    "cancel"):
            return self._reply(start_response, "404 Not Found", "no such operation")
        job_id, action = parts[1], parts[2]
        admin = self.admin()
        operation = {"retry": admin.retry, "discard": admin.discard, "cancel": admin.cancel}
        try:
            result = operation[action](job_id)
        except RetryConflict as exc:
            return self._reply(start_response, "409 Conflict", str(exc))
        message = (f"{action}: {result.previous} -> {result.state}" if result.changed
                   else result.message)
        location = f"/job/{quote(job_id, safe='')}?{urlencode({'msg': message})}"
        start_response("303 See Other", [("Location", location),
                                         ("Content-Type", "text/plain; charset=utf-8"),
                                         *_SECURITY_HEADERS])
        return [message.encode()]

    def _authenticate(self, environ: Environ,
                      start_response: StartResponse) -> Iterable[bytes] | None:
        """None if the request carries the admin token, else the refusal to send."""
        if not self.admin_token:
            return self._reply(
                start_response, "403 Forbidden",
                "the dashboard is read-only: set plus_admin_token (a secret of at least 16 "
                "characters) in the app's configuration to allow retry, discard and cancel")
        presented = _presented_token(environ)
        if presented is None or not secrets.compare_digest(presented.encode(),
                                                           self.admin_token.encode()):
            return self._reply(
                start_response, "401 Unauthorized",
                "authentication required: the plus_admin_token secret as the HTTP Basic "
                "password (any user) or as 'Authorization: Bearer <token>'",
                [("WWW-Authenticate", 'Basic realm="celery-plus admin", charset="UTF-8"')])
        return None

    def _metrics(self, admin: api.Admin, start_response: StartResponse) -> Iterable[bytes]:
        raw = metrics_text(admin).encode()
        start_response("200 OK", [("Content-Type", "text/plain; version=0.0.4; charset=utf-8"),
                                  ("Content-Length", str(len(raw))), *_SECURITY_HEADERS])
        return [raw]

    # -- responses --------------------------------------------------------------------------
    @staticmethod
    def _reply(start_response: StartResponse, status: str, text: str,
               extra: list[tuple[str, str]] | None = None) -> Iterable[bytes]:
        data = text.encode()
        start_response(status, [("Content-Type", "text/plain; charset=utf-8"),
                                ("Content-Length", str(len(data))), *_SECURITY_HEADERS,
                                *(extra or [])])
        return [data]

    @staticmethod
    def _json(start_response: StartResponse, data: Any) -> Iterable[bytes]:
        raw = json.dumps(data, default=str).encode()
        start_response("200 OK", [("Content-Type", "application/json"),
                                  ("Content-Length", str(len(raw))), *_SECURITY_HEADERS])
        return [raw]

    @staticmethod
    def _html(start_response: StartResponse, title: str, body: str) -> Iterable[bytes]:
        nav = " ".join(f'<a href="/jobs/{_e(s)}">{_e(s)}</a>' for s in STATES)
        page = (f"<!doctype html><html><head><meta charset='utf-8'><title>{_e(title)}</title>"
                f"<style>{_CSS}</style></head><body><nav><a href='/'><b>celery-plus</b></a> "
                f"{nav}</nav><h1>{_e(title)}</h1>{body}</body></html>")
        raw = page.encode()
        start_response("200 OK", [("Content-Type", "text/html; charset=utf-8"),
                                  ("Content-Length", str(len(raw))), *_SECURITY_HEADERS])
        return [raw]

    @staticmethod
    def _table(headers: list[str], rows: list[list[str]]) -> str:
        """``rows`` cells are HTML already (escape values before)."""
        head = "".join(f"<th>{_e(h)}</th>" for h in headers)
        body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
        return f"<table><tr>{head}</tr>{body}</table>"

    def _status_html(self, st: Status) -> str:
        counts = self._table(
            ["state", "jobs"],
            [[f'<a href="/jobs/{_e(s)}">{_e(s)}</a>', _e(st.counts[s])] for s in STATES])
        now = st.now_ms
        queues = self._table(
            ["queue", "enqueued", "scheduled", "blocked", "running", "failed", "oldest waiting"],
            [[_e(q.queue), _e(q.enqueued), _e(q.scheduled), _e(q.blocked), _e(q.running),
              f'<a href="/jobs/failed?{_e(urlencode({"queue": q.queue}))}">{_e(q.failed)}</a>',
              _e(age(None if q.oldest_waiting_ms is None
                     else (now - q.oldest_waiting_ms) / 1000))]
             for q in st.queues])
        out = (f"<p>dead letters: <a href='/jobs/failed'>{_e(st.dead_letters)}</a>; oldest waiting "
               f"job: {_e(age(st.oldest_waiting_age_s))}</p><h2>Jobs</h2>{counts}"
               f"<h2>Queues</h2>{queues}")
        if st.groups:
            out += "<h2>Concurrency groups</h2>" + self._table(
                ["group", "running", "limit", "blocked"],
                [[_e(g.group), _e(g.running), _e(g.limit), _e(g.blocked)] for g in st.groups])
        return out

    def _page_html(self, page: Page, query: dict[str, str]) -> str:
        fields = "".join(
            f'<input name="{_e(n)}" placeholder="{_e(n)}" value="{_e(query.get(n, ""))}"> '
            for n in ("task", "queue", "text"))
        form = f'<form method="get">{fields}<button>filter</button></form>'
        rows = [[f'<a href="/job/{_e(quote(r.id, safe=""))}">{_e(r.id)}</a>', _e(r.name),
                 _e(r.queue), _e(when(r.at_ms)), _e(r.deliveries),
                 _e(f"{r.exc_type}: {r.exc_message}" if r.exc_type else r.args_repr)]
                for r in page.items]
        table = self._table(["task id", "task", "queue", "at (UTC)", "deliveries",
                             "error / args"], rows)
        links = []
        for number, label in ((page.page - 1, "newer"), (page.page + 1, "older")):
            if 1 <= number <= page.pages:
                params = {k: v for k, v in query.items() if v and k != "page"}
                links.append(f'<a href="?{_e(urlencode({**params, "page": number}))}">'
                             f"{_e(label)}</a>")
        return (f"{form}<p>{_e(page.total)} jobs, page {_e(page.page)} of "
                f"{_e(max(page.pages, 1))} "
                f"{' '.join(links)}</p>{table}")

    def _job_html(self, job_id: str, message: str) -> str:
        d = self.admin().show(job_id)
        s = d.summary
        facts = [("state", d.state), ("task", s.name), ("queue", s.queue),
                 ("deliveries", f"{s.deliveries} of {d.max_deliveries or '-'}"),
                 ("enqueued", when(s.enqueued_ms)), ("started", when(d.started_ms)),
                 ("finished", when(d.finished_ms)), ("worker", d.worker or "-"),
                 ("reason", s.reason or "-"),
                 ("error", f"{s.exc_type}: {s.exc_message}" if s.exc_type else "-"),
                 ("unique key", f"{d.unique_lock} ({d.unique_window}), held by "
                                f"{d.unique_holder or 'nobody'}" if d.unique_lock else "-")]
        out = f'<p class="msg">{_e(message)}</p>' if message else ""
        out += self._table(["", ""], [[_e(k), _e(v)] for k, v in facts])
        actions = {"failed": ("retry", "discard"), "enqueued": ("cancel",),
                   "scheduled": ("cancel",), "blocked": ("cancel",)}.get(d.state, ())
        if actions and not self.admin_token:
            out += ("<p>read-only: set <code>plus_admin_token</code> to "
                    f"{_e(' / '.join(actions))} from here</p>")
        for action in actions if self.admin_token else ():
            out += (f'<form method="post" action="/job/{_e(quote(job_id, safe=""))}/'
                    f'{_e(action)}"><input type="hidden" name="token" value="{_e(self.token)}">'
                    f'<button id="{_e(action)}">{_e(action)}</button></form> ')
        if d.decode_error:
            out += (f"<h2>Message</h2><p>cannot be decoded: {_e(d.decode_error)}</p>"
                    f"<pre>{_e(d.raw_message)}</pre>")
        else:
            out += (f"<h2>Arguments</h2><pre>args = {_e(json.dumps(d.args, default=str))}\n"
                    f"kwargs = {_e(json.dumps(d.kwargs, default=str))}</pre>"
                    f"<h2>Headers</h2><pre>{_e(json.dumps(d.headers, indent=2, default=str))}"
                    "</pre>")
        if d.history:
            out += "<h2>History</h2>" + self._table(
                ["#", "at (UTC)", "outcome", "worker", "error"],
                [[_e(h.get("delivery", "")), _e(when(h.get("finished_ms"))),
                  _e(h.get("outcome", "")), _e(h.get("worker") or "-"),
                  _e(": ".join(str(x) for x in (h.get("exc_type"), h.get("exc_message"))
                               if x))] for h in d.history])
        if d.traceback:
            out += f"<h2>Traceback</h2><pre>{_e(d.traceback)}</pre>"
        return out


def _metric_line(name: str, labels: dict[str, str], value: float) -> str:
    def esc(text: str) -> str:
        return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')

    number = str(value) if isinstance(value, int) else repr(float(value))
    inner = ",".join(f'{k}="{esc(v)}"' for k, v in labels.items())
    return f"{name}{{{inner}}} {number}" if inner else f"{name} {number}"


def metrics_text(admin: api.Admin) -> str:
    """The store's status in the Prometheus text exposition format (version 0.0.4)."""
    st = admin.status()
    out: list[str] = []

    def family(name: str, kind: str, doc: str, samples: list[tuple[dict[str, str], float]]
               ) -> None:
        out.extend([f"# HELP {name} {doc}", f"# TYPE {name} {kind}"])
        out.extend(_metric_line(name, labels, value) for labels, value in samples)

    family("celery_plus_jobs", "gauge", "Jobs in the store by state.",
           [({"state": s}, st.counts[s]) for s in STATES])
    family("celery_plus_queue_jobs", "gauge", "Jobs of a queue by state.",
           [({"queue": q.queue, "state": s}, getattr(q, s)) for q in st.queues
            for s in ("enqueued", "scheduled", "blocked", "running", "failed")])
    family("celery_plus_dead_letters", "gauge", "Dead letters (failed jobs) kept.",
           [({}, st.dead_letters)])
    family("celery_plus_oldest_waiting_seconds", "gauge",
           "Age of the longest-waiting ready job (0: none waits).",
           [({}, st.oldest_waiting_age_s or 0.0)])
    family("celery_plus_group_running", "gauge", "Slots in use of a concurrency group.",
           [({"group": g.group}, g.running) for g in st.groups])
    family("celery_plus_group_limit", "gauge", "Limit of a concurrency group.",
           [({"group": g.group}, g.limit) for g in st.groups])
    family("celery_plus_group_blocked", "gauge", "Jobs blocked behind a concurrency group.",
           [({"group": g.group}, g.blocked) for g in st.groups])
    backend: Any = getattr(admin.store, "backend", None)
    stats: dict[str, int] = dict(backend.stats()) if hasattr(backend, "stats") else {}
    for key, doc in (("recovered", "Deliveries recovered after an expired lease."),
                     ("deduplicated", "Publishes answered with the holder of a unique key."),
                     ("dead_lettered", "Jobs that became dead letters."),
                     ("blocked", "Jobs parked behind a full concurrency group.")):
        family(f"celery_plus_{key}_total", "counter", doc, [({}, stats.get(key, 0))])
    return "\n".join(out) + "\n"


def make_app(target: Any, admin_token: str | None = None) -> Dashboard:
    """The dashboard for ``target``: a Celery app or a ``plus+...`` broker URL.

    ``admin_token`` defaults to the app's ``plus_admin_token``; without one the dashboard is
    read-only (see the module docstring)."""
    return Dashboard(target, admin_token)


def serve(target: Any, host: str = "127.0.0.1", port: int = 8055,
          admin_token: str | None = None) -> None:  # pragma: no cover
    """Serve the dashboard with wsgiref until interrupted."""
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    class Quiet(WSGIRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

    dashboard = make_app(target, admin_token)
    if host not in _LOOPBACK:
        print(f"warning: the dashboard's pages are readable by anyone who reaches {host}:{port} "
              "(no authentication for GET); prefer 127.0.0.1 or an authenticating proxy",
              file=sys.stderr)
    with make_server(host, port, dashboard, handler_class=Quiet) as server:
        mode = "actions need plus_admin_token" if dashboard.admin_token else "read-only"
        print(f"celery-plus dashboard on http://{host}:{port}/ ({mode}; Ctrl+C to stop)")
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            dashboard.close()
