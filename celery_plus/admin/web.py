"""The admin's web dashboard: a WSGI application on the standard library only.

``make_app(app)`` returns a WSGI callable over :mod:`celery_plus.admin.api` (and nothing
else); ``celery-plus admin -A proj`` serves it with :mod:`wsgiref` on 127.0.0.1:8055. It may
be mounted under a path prefix inside another site (Django, Flask, any WSGI server): every
link, form action and redirect honours the request's ``SCRIPT_NAME`` (:class:`Mount` moves a
prefix there for servers that do not).

Pages (HTML from :mod:`celery_plus.admin.pages`; every value escaped):
  ``/``                     counts per state, throughput, per-queue status, concurrency groups
  ``/jobs/<state>``         a listing, newest first (``?task=&queue=&text=&older_than=&page=``)
                            with bulk actions on the selected rows or on the whole filter; a
                            text search looks at the newest 1,000 matches of the other filters
                            (``&search=all``: at every one)
  ``/job/<task id>``        the job: message, history, traceback; buttons for the operations
  ``/failed``               short for ``/jobs/failed``
JSON (same data as the CLI's ``--json``): ``/api/status``, ``/api/throughput``,
``/api/jobs/<state>``, ``/api/job/<task id>``. ``/metrics``: Prometheus text format
(:mod:`celery_plus.admin.metrics`).

Operations are POSTs, answered with a redirect (``?msg=`` says what happened); 404 for an
unknown job or page, 409 for a retry conflict:

* ``POST /job/<task id>/<retry|discard|cancel>``;
* ``POST /jobs/<state>/bulk`` with ``do=<action>:selected`` and the ``id`` of each selected
  row, or ``do=<action>:scope`` with the listing's ``task`` / ``queue`` / ``older_than``.
  Discard, purge, cancel and every whole-filter action first answer a confirmation page
  (200) whose button posts the same request with ``confirm=1``.

Every POST needs both:

* the admin token, the ``plus_admin_token`` setting (or ``make_app(..., admin_token=)``): the
  password of HTTP Basic auth (any user name) or ``Authorization: Bearer <token>``. Without
  the setting every POST is refused (403, naming the setting): the dashboard is read-only;
  with it, a POST without the right credentials gets 401 and a Basic-auth challenge;
* the form's ``token`` (a per-process secret that guards against cross-site posts; 403).

GET pages (and ``/metrics``) need no credentials: bind to localhost (the default) or put the
dashboard behind your authenticating proxy. Pages are sent with a Content-Security-Policy that
allows no script at all.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import json
import secrets
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import parse_qs

from .. import settings
from . import api, pages
from .cli import parse_duration
from .metrics import metrics_text
from .pages import Bulk, Urls
from .store import STATES, BulkResult, JobNotFound, Page, RetryConflict

StartResponse = Callable[..., Any]
Environ = dict[str, Any]
WSGIApp = Callable[[Environ, StartResponse], Iterable[bytes]]

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
#: Largest form body accepted (a bulk action on a page of 1000 selected ids fits).
MAX_FORM_BYTES = 256 * 1024


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


def _older_than(filters: dict[str, str]) -> float | None:
    """The ``older_than`` filter in seconds (``90s``, ``15m``, ``2h``, ``7d``)."""
    text = filters.get("older_than")
    if not text:
        return None
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise ValueError(f"older_than: {exc}") from None


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

    @property
    def _form_token(self) -> str | None:
        """The token forms carry, or None when the dashboard is read-only."""
        return self.token if self.admin_token else None

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        method = environ.get("REQUEST_METHOD", "GET")
        path = environ.get("PATH_INFO", "/") or "/"
        query = {k: v[-1] for k, v in parse_qs(environ.get("QUERY_STRING", "")).items()}
        parts = [p for p in path.split("/") if p]
        urls = Urls(environ.get("SCRIPT_NAME", ""))
        try:
            if method == "POST":
                return self._post(environ, urls, parts, start_response)
            if method != "GET":
                return self._reply(start_response, "405 Method Not Allowed", "method not allowed")
            return self._get(urls, parts, query, start_response)
        except JobNotFound as exc:
            return self._reply(start_response, "404 Not Found", str(exc))
        except ValueError as exc:
            return self._reply(start_response, "400 Bad Request", str(exc))

    def _get(self, urls: Urls, parts: list[str], query: dict[str, str],
             start_response: StartResponse) -> Iterable[bytes]:
        admin = self.admin()
        if not parts:
            body = pages.overview(urls, admin.status(), admin.throughput())
            return self._html(start_response, urls, "celery-plus", body)
        if parts[0] == "api" and len(parts) >= 2:
            if parts[1] == "status" and len(parts) == 2:
                return self._json(start_response, admin.status().to_dict())
            if parts[1] == "throughput" and len(parts) == 2:
                return self._json(start_response, [t.to_dict() for t in admin.throughput()])
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
            filters = {k: query[k] for k in pages.FILTER_FIELDS if query.get(k)}
            body = pages.listing(urls, page, filters, query.get("msg", ""), self._form_token)
            return self._html(start_response, urls, f"{parts[1]} jobs", body)
        if parts[0] == "job" and len(parts) == 2:
            body = pages.job_page(urls, admin.show(parts[1]), query.get("msg", ""),
                                  self._form_token)
            return self._html(start_response, urls, f"job {parts[1]}", body)
        return self._reply(start_response, "404 Not Found", "no such page")

    def _page(self, state: str, query: dict[str, str]) -> Page:
        older = _older_than(query)
        # A text search decodes each record it looks at: the newest TEXT_LIMIT only, unless
        # the operator asks for all (``search=all``; the page says which it did).
        limit = None if query.get("search") == "all" else pages.TEXT_LIMIT
        return self.admin().jobs(state, task=query.get("task") or None,
                                 queue=query.get("queue") or None,
                                 text=query.get("text") or None, text_limit=limit,
                                 until=None if older is None else dt.timedelta(seconds=older),
                                 page=int(query.get("page") or 1),
                                 per_page=int(query.get("per_page") or pages.DEFAULT_PER_PAGE))

    # -- changes ----------------------------------------------------------------------------
    def _post(self, environ: Environ, urls: Urls, parts: list[str],
              start_response: StartResponse) -> Iterable[bytes]:
        refused = self._authenticate(environ, start_response)
        if refused is not None:
            return refused
        length = int(environ.get("CONTENT_LENGTH") or 0)
        if length > MAX_FORM_BYTES:
            return self._reply(start_response, "413 Content Too Large", "form too large")
        body = environ["wsgi.input"].read(length).decode() if length else ""
        form = parse_qs(body)
        if not secrets.compare_digest(form.get("token", [""])[-1].encode(), self.token.encode()):
            return self._reply(start_response, "403 Forbidden", "missing or wrong form token")
        if len(parts) == 3 and parts[0] == "jobs" and parts[2] == "bulk":
            return self._bulk(urls, parts[1], form, start_response)
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
        return self._redirect(start_response, urls.job(job_id, msg=message), message)

    def _bulk(self, urls: Urls, state: str, form: dict[str, list[str]],
              start_response: StartResponse) -> Iterable[bytes]:
        """A bulk action from a listing (see the module docstring)."""
        if state not in STATES:
            return self._reply(start_response, "404 Not Found", f"no {state!r} listing")
        action, _, target = form.get("do", [""])[-1].partition(":")
        allowed = (pages.SELECTED_ACTIONS if target == "selected" else
                   pages.SCOPE_ACTIONS if target == "scope" else {}).get(state, ())
        if action not in allowed:
            return self._reply(start_response, "400 Bad Request",
                               f"no bulk action {action or '?'}:{target or '?'} on {state} jobs")
        filters = {k: v[-1] for k, v in form.items() if k in pages.FILTER_FIELDS and v[-1]}
        if target == "scope" and filters.get("text"):
            return self._reply(start_response, "400 Bad Request",
                               "a whole-filter action takes task, queue and older_than, not a "
                               "text filter: clear the text filter, or select the rows")
        bulk = Bulk(state, action, target,
                    tuple(dict.fromkeys(form.get("id", []))) if target == "selected" else (),
                    {k: v for k, v in filters.items() if k in pages.SCOPE_FIELDS})
        back = {**(filters if target == "selected" else bulk.scope)}
        if target == "selected" and not bulk.ids:
            return self._redirect(start_response, urls.jobs(state, **back, msg="no job selected"),
                                  "no job selected")
        older = _older_than(filters)
        if bulk.needs_confirmation and form.get("confirm", [""])[-1] != "1":
            matched = len(bulk.ids) if target == "selected" else self.admin().jobs(
                state, task=bulk.scope.get("task"), queue=bulk.scope.get("queue"),
                until=None if older is None else dt.timedelta(seconds=older), per_page=1).total
            return self._html(start_response, urls, "confirm",
                              pages.confirm(urls, bulk, matched, self.token))
        result = self._run_bulk(bulk, older)
        message = _bulk_message(bulk, result)
        return self._redirect(start_response, urls.jobs(state, **back, msg=message), message)

    def _run_bulk(self, bulk: Bulk, older: float | None) -> BulkResult:
        admin = self.admin()
        if bulk.target == "selected":
            if bulk.action == "retry":
                return admin.retry_many(ids=bulk.ids)
            if bulk.action == "discard":
                return admin.discard_many(bulk.ids)
            if bulk.action == "cancel":
                return admin.cancel_many(bulk.ids)
            return admin.purge(bulk.state, ids=bulk.ids)
        scope: dict[str, Any] = {"task": bulk.scope.get("task"),
                                 "queue": bulk.scope.get("queue"), "older_than": older}
        unscoped = all(v is None for v in scope.values())  # confirmed on the page: all=True
        if bulk.action == "retry":
            return admin.retry_many(**scope, all=unscoped)
        return admin.purge(bulk.state, **scope, all=unscoped)

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
    def _redirect(start_response: StartResponse, location: str, text: str) -> Iterable[bytes]:
        data = text.encode()
        start_response("303 See Other", [("Location", location),
                                         ("Content-Type", "text/plain; charset=utf-8"),
                                         ("Content-Length", str(len(data))),
                                         *_SECURITY_HEADERS])
        return [data]

    @staticmethod
    def _json(start_response: StartResponse, data: Any) -> Iterable[bytes]:
        raw = json.dumps(data, default=str).encode()
        start_response("200 OK", [("Content-Type", "application/json"),
                                  ("Content-Length", str(len(raw))), *_SECURITY_HEADERS])
        return [raw]

    @staticmethod
    def _html(start_response: StartResponse, urls: Urls, title: str, body: str
              ) -> Iterable[bytes]:
        raw = pages.layout(urls, title, body).encode()
        start_response("200 OK", [("Content-Type", "text/html; charset=utf-8"),
                                  ("Content-Length", str(len(raw))), *_SECURITY_HEADERS])
        return [raw]


def _bulk_message(bulk: Bulk, result: BulkResult) -> str:
    verb = {"retry": "retried", "discard": "discarded", "purge": "purged",
            "cancel": "canceled"}[bulk.action]
    what = "selected" if bulk.target == "selected" else "matching"
    text = f"{verb} {len(result.changed)} of {result.matched} {what} {bulk.state} jobs"
    if result.conflicts:
        held = ", ".join(f"{job} (key held by {holder})" for job, holder in result.conflicts)
        text += f"; not retried: {held}"
    return text


class Mount:
    """Serve ``app`` under ``prefix`` (e.g. ``/ops/celery``) of a WSGI server that does not
    set ``SCRIPT_NAME`` itself: the prefix moves from ``PATH_INFO`` to ``SCRIPT_NAME``;
    other paths get ``fallback`` (default: 404)."""

    def __init__(self, app: WSGIApp, prefix: str, fallback: WSGIApp | None = None) -> None:
        if not prefix.startswith("/") or prefix.endswith("/"):
            raise ValueError(f"a mount prefix starts with '/' and does not end with one "
                             f"(got {prefix!r}; e.g. '/ops/celery')")
        self.app, self.prefix, self.fallback = app, prefix, fallback

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "") or ""
        if path == self.prefix or path.startswith(self.prefix + "/"):
            inner = {**environ, "SCRIPT_NAME": environ.get("SCRIPT_NAME", "") + self.prefix,
                     "PATH_INFO": path[len(self.prefix):] or "/"}
            return self.app(inner, start_response)
        if self.fallback is not None:
            return self.fallback(environ, start_response)
        start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
        return [b"not found"]


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
        print(f"celery-plus admin on http://{host}:{port}/ ({mode}; Ctrl+C to stop)",
              flush=True)
        try:
            server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            dashboard.close()


__all__ = ["Dashboard", "Mount", "make_app", "metrics_text", "serve"]
