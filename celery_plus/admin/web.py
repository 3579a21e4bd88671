"""The admin's web dashboard: a WSGI application (``make_app``) over :mod:`.api`.

``celery-plus admin -A proj`` serves it with a production WSGI server (:mod:`.server`); it
may also be mounted under a path prefix inside another site (Django, Flask, any WSGI server):
every link, form action, cookie and redirect honours the request's ``SCRIPT_NAME``
(:class:`Mount` moves a prefix there for servers that do not).

Pages (HTML from :mod:`.pages`; every value escaped, long values cut):
  ``/``                     counts, a chart of completed and failed jobs (``?range=1h|6h|24h|7d``),
                            throughput, per-queue depth and latency, concurrency groups
  ``/jobs/<state>``         a listing (``?task=&queue=&text=&older_than=&since=&until=&sort=
                            newest|oldest&page=&per_page=``) with bulk actions
  ``/job/<task id>``        the job (``/job?id=`` too): message, result, runtime, history;
                            ``?raw=<field>``: one whole value as plain text
  ``/workers``              workers (store leases + remote control), stop / shut down
  ``/failed``               short for ``/jobs/failed``; ``/login``: ask for the operator's
                            credentials and start a new browser session (:mod:`.sessions`)
Every page takes ``?refresh=<seconds>`` (live: the page reloads itself, no script).
JSON: ``/api/status``, ``/api/throughput``, ``/api/activity``, ``/api/latency``,
``/api/workers``, ``/api/jobs/<state>``, ``/api/job/<task id>``. ``/metrics``: Prometheus.

Each request has a deadline, its store queries included (:mod:`.deadline`); failed logins
are logged and limited (:mod:`.throttle`). ``POST /logout`` ends the browser's session and
has its cached Basic credentials challenged (:mod:`.security`).
Actions are POSTs answered with a redirect whose ``msg`` is signed (:mod:`.security`):
``/job/<id>/<retry|discard|cancel|terminate>``, ``/jobs/<state>/bulk``,
``/workers/<node>/<stop|shutdown>``. Destructive ones first answer a confirmation page whose
button posts the same request with ``confirm=1``. Who may do what, and the checks each
request passes (allowed hosts, credentials, cross-site posts): :mod:`.security`.

Answers: 400 for a bad parameter (with what is wrong), 401 / 403 for access, 404 for an
unknown job or page, 409 for a retry conflict, 413 for a body over :data:`MAX_FORM_BYTES`,
429 after too many failed logins (401 with the challenge to Basic credentials), 503 when
the store cannot be reached or the request stopped (its deadline passed or its client left:
the answer says which, and what a bulk action did before it stopped); never a traceback.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

from celery_plus import settings
from celery_plus.admin import api, deadline, limits, ops_web, pages, workers
from celery_plus.admin.limits_page import limits_page
from celery_plus.admin.markup import Urls, layout
from celery_plus.admin.metrics import CONTENT_TYPE, metrics_text
from celery_plus.admin.pages import Bulk, ListingView
from celery_plus.admin.params import (
    MAX_PAGE,
    MAX_TEXT,
    parse_duration,
    parse_int,
    parse_moment,
    shown,
)
from celery_plus.admin.schedules import ScheduleNotFound
from celery_plus.admin.security import (
    ANONYMOUS,
    OPERATOR,
    Access,
    Identity,
    forget_logged_out,
    logged_out,
    logged_out_header,
    session_header,
    session_of,
)
from celery_plus.admin.sessions import ENDED, EXPIRED, NONE, Sessions
from celery_plus.admin.throttle import Throttle
from celery_plus.model.admin import (
    STATES,
    AdminError,
    BulkResult,
    JobNotFound,
    Page,
    RetryConflict,
    check_ids,
    unreachable_errors,
)

logger = logging.getLogger("celery_plus.admin.web")

StartResponse = Callable[..., Any]
Environ = dict[str, Any]
WSGIApp = Callable[[Environ, StartResponse], Iterable[bytes]]

#: Sent with every response: no script, no framing, forms post to this origin only.
SECURITY_HEADERS = [
    ("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; "
                                "img-src 'self'; form-action 'self'; frame-ancestors 'none'; "
                                "base-uri 'none'"),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    # same-origin, not no-referrer: with no-referrer a browser sends ``Origin: null`` on the
    # dashboard's own form posts, which the cross-site check must refuse.
    ("Referrer-Policy", "same-origin"),
    ("Cache-Control", "no-store"),
]
#: Largest request body accepted (a bulk action on a page of 1000 selected ids fits).
MAX_FORM_BYTES = 256 * 1024
#: Most query or form fields read from one request.
MAX_FIELDS = 2000
#: Longest message a redirect carries to the next page.
MAX_MESSAGE = 2000
#: Live refresh bounds (seconds).
REFRESH_RANGE = (2, 3600)


class HttpError(Exception):
    """An answer other than 200 (status line, text, extra headers)."""

    def __init__(self, status: str, text: str, headers: list[tuple[str, str]] | None = None):
        super().__init__(text)
        self.status, self.text, self.headers = status, text, headers or []


_CHALLENGE = [("WWW-Authenticate", 'Basic realm="celery-plus admin", charset="UTF-8"')]


@dataclass
class Request:
    """What the dashboard reads of one request."""

    environ: Environ
    method: str
    path: str
    query: dict[str, str]
    urls: Urls
    who: Identity
    #: The id of this browser's session, when its cookie is valid (:mod:`.sessions`).
    session: str | None
    #: What its session cookie said (``valid``, ``none``, ``expired``, ``ended``).
    session_state: str = NONE
    #: Set when this response starts a browser session (its ``Set-Cookie``).
    new_cookie: list[tuple[str, str]] = field(default_factory=list)

    def text(self, name: str, limit: int = MAX_TEXT) -> str:
        value = self.query.get(name, "")
        if len(value) > limit:
            raise HttpError("400 Bad Request", f"{name}: at most {limit} characters")
        return value


def _path_text(environ: Environ) -> str:
    """PATH_INFO as text: WSGI gives its bytes as latin-1; task ids are UTF-8."""
    raw = str(environ.get("PATH_INFO") or "/")
    try:
        data = raw.encode("latin-1")
    except UnicodeEncodeError:
        return raw  # not a WSGI string (decoded already by a bridge): taken as it is
    return data.decode("utf-8", "replace")


def _fields(text: str) -> dict[str, list[str]]:
    try:
        return parse_qs(text, max_num_fields=MAX_FIELDS, errors="replace")
    except ValueError:
        raise HttpError("400 Bad Request", f"too many fields (at most {MAX_FIELDS})") from None


def _top(value: str | None) -> int:
    """The ``top`` parameter of the limits page (keys per task; default limits.TOP)."""
    if value is None:
        return limits.TOP
    if not value.isdigit() or len(value) > 5 or not 1 <= int(value) <= limits.TOP_MAX:
        raise ValueError(f"top: a number of keys from 1 to {limits.TOP_MAX}")
    return int(value)


def _configured(target: Any) -> settings.PlusConfig:
    """The ``plus_*`` settings of a Celery app (defaults for a URL)."""
    conf = getattr(target, "conf", None)
    if conf is None:
        return settings.resolve({})
    return settings.resolve({k: conf.get(k) for k in settings.BY_NAME
                             if k.startswith("plus_admin") and conf.get(k) is not None},
                            settings.written_names(conf.keys()))


class Dashboard:
    """The WSGI application (see the module docstring).

    ``admin_token``, ``read_token``, ``public_read`` and ``allowed_hosts`` default to the
    app's ``plus_admin_*`` settings; ``extra_hosts`` are answered to as well (the address
    ``celery-plus admin`` binds)."""

    def __init__(self, target: Any, admin_token: str | None = None,
                 read_token: str | None = None, public_read: bool | None = None,
                 allowed_hosts: Iterable[str] | None = None,
                 extra_hosts: Iterable[str] = ()) -> None:
        self.target = target
        conf = _configured(target)
        given = settings.resolve({"plus_admin_token": admin_token,
                                  "plus_admin_read_token": read_token,
                                  "plus_admin_allowed_hosts": None if allowed_hosts is None
                                  else list(allowed_hosts)})
        hosts = (given.admin_allowed_hosts if allowed_hosts is not None
                 else conf.admin_allowed_hosts)
        if hosts is None:
            from celery_plus.admin.security import LOOPBACK_HOSTS

            hosts = LOOPBACK_HOSTS
        self.access = Access(
            admin_token=given.admin_token if admin_token is not None else conf.admin_token,
            read_token=given.admin_read_token if read_token is not None
            else conf.admin_read_token,
            public_read=conf.admin_public_read if public_read is None else public_read,
            allowed_hosts=(*hosts, *extra_hosts))
        #: ``plus_admin_metrics_key_labels``: key values as /metrics label values.
        self.metrics_key_labels = conf.admin_metrics_key_labels
        token = self.access.admin_token
        self.sessions = Sessions(token) if token is not None else None
        self.throttle = Throttle()
        #: Seconds a request may run, its store queries included (:mod:`.deadline`).
        self.request_deadline = deadline.REQUEST_DEADLINE
        self._lock = threading.Lock()
        self._admin: api.Admin | None = None
        self._store_errors = unreachable_errors()

    @property
    def admin_token(self) -> str | None:
        return self.access.admin_token

    # -- plumbing ---------------------------------------------------------------------------
    def admin(self) -> api.Admin:
        with self._lock:
            if self._admin is None:
                self._admin = api.connect(self.target)
                deadline.bind(self._admin.store)
            return self._admin

    def close(self) -> None:
        with self._lock:
            if self._admin is not None:
                self._admin.close()
                self._admin = None

    def __call__(self, environ: Environ, start_response: StartResponse) -> Iterable[bytes]:
        with deadline.bounded(self.request_deadline,
                              environ.get("waitress.client_disconnected")) as limit:
            status, headers, body = self._answer(environ, limit)
        raw = body.encode("utf-8", "replace")
        start_response(status, [*headers, ("Content-Length", str(len(raw))),
                                 *SECURITY_HEADERS])
        # HEAD: the headers of the GET, no body (waitress sends what it is given, and a body
        # after a HEAD's headers would be read as the next response on a kept-alive
        # connection, e.g. a proxy's)
        return [b""] if environ.get("REQUEST_METHOD") == "HEAD" else [raw]

    def _answer(self, environ: Environ, limit: deadline.Deadline
                ) -> tuple[str, list[tuple[str, str]], str]:
        """(status, headers, body) of a request; never raises."""
        try:
            request = self._request(environ)
            status, headers, body = self._route(request)
            return status, [*headers, *request.new_cookie], body
        except HttpError as exc:
            return exc.status, [("Content-Type", "text/plain; charset=utf-8"),
                                *exc.headers], exc.text
        except JobNotFound as exc:
            return "404 Not Found", _TEXT, str(exc)
        except RetryConflict as exc:
            return "409 Conflict", _TEXT, str(exc)
        except (ValueError, AdminError) as exc:
            return "400 Bad Request", _TEXT, str(exc)
        except deadline.Stopped as exc:
            return self._stopped(environ, exc)
        except Exception as exc:
            reason = limit.reason()
            if reason is not None:  # (its query was interrupted: the error says no more)
                return self._stopped(environ, deadline.Stopped(reason))
            if isinstance(exc, self._store_errors):
                logger.warning("celery-plus admin: the store cannot be reached: %r", exc)
                return ("503 Service Unavailable", _TEXT,
                        f"the store cannot be reached: {type(exc).__name__}")
            logger.exception("celery-plus admin: error answering %s %s",
                             environ.get("REQUEST_METHOD"), environ.get("PATH_INFO"))
            return ("500 Internal Server Error", _TEXT,
                    "internal error (logged by the dashboard)")

    @staticmethod
    def _stopped(environ: Environ, exc: deadline.Stopped
                 ) -> tuple[str, list[tuple[str, str]], str]:
        """The 503 of a request stopped by its deadline or its client leaving."""
        text = deadline.stopped_text(exc)
        logger.warning("celery-plus admin: %s %s %s", environ.get("REQUEST_METHOD"),
                       environ.get("PATH_INFO"), text)
        return "503 Service Unavailable", [*_TEXT, ("Retry-After", "30")], text

    def _request(self, environ: Environ) -> Request:
        problem = self.access.host_problem(environ)
        if problem is not None:
            raise HttpError("400 Bad Request", problem)
        query = {k: v[-1] for k, v in _fields(str(environ.get("QUERY_STRING") or "")).items()}
        state, session = (self.sessions.open(session_of(environ)) if self.sessions is not None
                          else (NONE, None))
        path = _path_text(environ)
        address = str(environ.get("REMOTE_ADDR") or "")
        who = self.access.identify(environ)
        if who.wrong:  # (valid credentials are never refused: .throttle)
            wait = self.throttle.failed(address, path)
            if wait > 0:
                seconds = str(int(wait) + 1)
                # Basic: 401 with the challenge, so a browser whose typo this was drops it and
                # asks again (Chromium keeps the credentials of a 429, challenge or not)
                raise HttpError("429 Too Many Requests" if who.bearer else "401 Unauthorized",
                                f"too many failed logins (from {address} or in all): try "
                                f"again in {seconds} s",
                                [("Retry-After", seconds), *([] if who.bearer else _CHALLENGE)])
        r = Request(environ=environ, method=str(environ.get("REQUEST_METHOD") or "GET"),
                    path=path, query=query, urls=Urls(str(environ.get("SCRIPT_NAME") or "")),
                    who=who, session=session, session_state=state)
        # A browser re-sends the Basic credentials it cached until it is closed: after a
        # log-out (its mark) or with an ended session, they are challenged, so it forgets
        # them and asks; the answer to that prompt comes without mark or session.
        mark = logged_out(environ, self.access.admin_token)
        if who.role != ANONYMOUS and not who.bearer and (state in (EXPIRED, ENDED) or mark):
            why = "has expired" if state == EXPIRED else "was logged out"
            raise HttpError("401 Unauthorized", f"this browser's session {why}: log in again "
                            f"(reload, or open {r.urls('/login')}) and give the token when "
                            "the browser asks", [*_CHALLENGE, session_header("", environ),
                                                 *forget_logged_out(environ)])
        if mark is False:  # not signed here: ignored, and cleared
            r.new_cookie += forget_logged_out(environ)
        return r

    def _route(self, r: Request) -> tuple[str, list[tuple[str, str]], str]:
        if r.method == "POST":
            return self._post(r)
        if r.method not in ("GET", "HEAD"):
            raise HttpError("405 Method Not Allowed", "method not allowed",
                            [("Allow", "GET, HEAD, POST")])
        if r.path == "/login":
            return self._login(r)
        if not self.access.may_read(r.who):
            raise HttpError("401 Unauthorized",
                            "authentication required: plus_admin_token or "
                            "plus_admin_read_token as the HTTP Basic password (any user) or "
                            "as 'Authorization: Bearer <token>'", _CHALLENGE)
        return self._get(r)

    # -- reading ----------------------------------------------------------------------------
    def _get(self, r: Request) -> tuple[str, list[tuple[str, str]], str]:
        path, admin = r.path, self.admin()
        parts = [p for p in path.split("/") if p]
        if parts[:1] == ["api"]:
            return self._api(r, parts[1:])
        if parts == ["metrics"]:
            return "200 OK", [("Content-Type", CONTENT_TYPE)], \
                metrics_text(admin, self.metrics_key_labels)
        if parts == ["failed"]:
            parts = ["jobs", "failed"]
        refresh = self._refresh(r)
        if not parts:
            return self._overview(r, refresh)
        if parts[0] == "jobs" and len(parts) == 2:
            return self._listing(r, parts[1], refresh)
        if parts == ["workers"]:
            return self._workers(r, refresh)
        if parts[0] == "errors" or parts in (["tasks"], ["history"]):
            answer = ops_web.get(self, r, parts, refresh)
            if answer is None:
                raise HttpError("404 Not Found", "no such page")
            return answer
        if parts == ["limits"]:
            top = _top(r.query.get("top"))
            body = limits_page(r.urls, limits.limits(self.admin(), top), top)
            return self._html(r, "limits in use", body, refresh,
                              lambda n: r.urls("/limits", refresh=n or None))
        if parts == ["schedules"]:
            admin = self.admin()
            body = pages.schedules_page(r.urls, admin.schedules(), self._message(r),
                                        self._form_token(r))
            return self._html(r, "schedules", body, refresh,
                              lambda n: r.urls("/schedules", refresh=n or None))
        if parts[0] == "job":
            job_id = r.query["id"] if "id" in r.query else path[len("/job/"):]
            if not path.startswith("/job/") and "id" not in r.query:
                raise HttpError("404 Not Found", "no such page")
            return self._job(r, job_id, refresh)
        raise HttpError("404 Not Found", "no such page")

    @staticmethod
    def _refresh(r: Request) -> int:
        text = r.query.get("refresh", "")
        if text in ("", "0"):
            return 0
        return parse_int("refresh", text, *REFRESH_RANGE)

    def _html(self, r: Request, title: str, body: str, refresh: int | None = None,
              url_of: Callable[[int], str] | None = None) -> tuple[str, list[tuple[str, str]],
                                                                    str]:
        live = pages.live(url_of, refresh or 0) if url_of is not None else None
        token = self._form_token(r)  # an operator's browser gets its session on any page
        page = layout(r.urls, title, body, self.admin().counts(), live, token)
        return "200 OK", [("Content-Type", "text/html; charset=utf-8")], page

    def _overview(self, r: Request, refresh: int) -> tuple[str, list[tuple[str, str]], str]:
        admin = self.admin()
        key = r.query.get("range") or pages.DEFAULT_RANGE
        if key not in pages.RANGES:
            raise ValueError(f"range: one of {', '.join(pages.RANGES)} (got {shown(key)})")
        span, buckets = pages.RANGES[key]
        body = pages.overview(r.urls, admin.status(), admin.throughput(),
                              admin.activity(span, buckets), admin.latency(), key, refresh,
                              admin.paused_queues(), self._form_token(r), self._message(r))
        return self._html(r, "celery-plus", body, refresh,
                          lambda n: r.urls("/", range=None if key == pages.DEFAULT_RANGE
                                           else key, refresh=n or None))

    def _listing_view(self, r: Request, state: str) -> ListingView:
        filters = {k: r.text(k) for k in pages.FILTER_FIELDS if r.query.get(k)}
        sort = r.query.get("sort") or "newest"
        if sort not in api.ORDERS:
            raise ValueError(f"sort: one of {', '.join(api.ORDERS)} (got {shown(sort)})")
        page = parse_int("page", r.query["page"], 1, MAX_PAGE) if r.query.get("page") else 1
        per_page = (parse_int("per_page", r.query["per_page"], 1, api.MAX_PER_PAGE)
                    if r.query.get("per_page") else pages.DEFAULT_PER_PAGE)
        return ListingView(state, filters, sort, page, per_page, self._refresh(r))

    def _page(self, view: ListingView) -> Page:
        filters = view.filters
        for switch in pages.SWITCH_FIELDS:
            if filters.get(switch) not in (None, "all"):
                raise ValueError(f"{switch}: 'all' or nothing (got {shown(filters[switch])})")
        until: api.Moment = _moment("until", filters.get("until"))
        older = _older_than(filters)
        if older is not None:
            cutoff = dt.timedelta(seconds=older)
            until = cutoff if until is None else _earlier(self.admin(), until, cutoff)
        # A text search decodes each record it looks at: the first TEXT_LIMIT only, unless
        # the operator asks for all (``search=all``; the page says which it did).
        limit = None if filters.get("search") == "all" else pages.TEXT_LIMIT
        # So does a walk of the queues (Redis, a task or time filter): ``walk=all`` lifts it.
        walk_limit = None if filters.get("walk") == "all" else pages.WALK_LIMIT
        return self.admin().jobs(view.state, task=filters.get("task") or None,
                                 queue=filters.get("queue") or None,
                                 text=filters.get("text") or None, text_limit=limit,
                                 since=_moment("since", filters.get("since")), until=until,
                                 page=view.page, per_page=view.per_page, order=view.sort,
                                 walk_limit=walk_limit)

    def _listing(self, r: Request, state: str, refresh: int
                 ) -> tuple[str, list[tuple[str, str]], str]:
        view = self._listing_view(r, state)
        page = self._page(view)
        body = pages.listing(r.urls, page, view, self._message(r), self._form_token(r),
                             self.access.read_only, select_all=r.query.get("select") == "all")
        return self._html(r, f"{state} jobs", body, refresh,
                          lambda n: r.urls.jobs(state, **view.query(refresh=n)))

    def _job(self, r: Request, job_id: str, refresh: int
             ) -> tuple[str, list[tuple[str, str]], str]:
        admin = self.admin()
        detail = admin.show(job_id)
        result = admin.result(job_id)
        if r.query.get("raw"):
            value = pages.raw_value(detail, r.query["raw"], result)
            return "200 OK", [("Content-Type", "text/plain; charset=utf-8"),
                              ("Content-Disposition", "inline")], value
        body = pages.job_page(r.urls, detail, self._message(r), self._form_token(r),
                              self.access.read_only, result, admin.store.now_ms())
        return self._html(r, f"job {job_id}", body, refresh,
                          lambda n: r.urls.job(job_id, refresh=n or None))

    def _workers(self, r: Request, refresh: int) -> tuple[str, list[tuple[str, str]], str]:
        admin = self.admin()
        now = admin.store.now_ms()
        views = workers.workers(admin, now)
        asked = r.query.get("ask") == "1"
        if asked:  # remote control on demand: one broadcast
            workers.ask(admin, views)
        body = pages.workers_page(r.urls, views, now, self._message(r),
                                  self._form_token(r), admin.app is not None, asked)
        return self._html(r, "workers", body, refresh,
                          lambda n: r.urls("/workers", refresh=n or None))

    def _api(self, r: Request, parts: list[str]) -> tuple[str, list[tuple[str, str]], str]:
        admin = self.admin()
        data: Any
        if parts == ["status"]:
            data = admin.status().to_dict()
        elif parts == ["throughput"]:
            data = [t.to_dict() for t in admin.throughput()]
        elif parts == ["activity"]:
            key = r.query.get("range") or pages.DEFAULT_RANGE
            if key not in pages.RANGES:
                raise ValueError(f"range: one of {', '.join(pages.RANGES)} (got {shown(key)})")
            data = admin.activity(*pages.RANGES[key]).to_dict()
        elif parts == ["latency"]:
            data = [vars(q) for q in admin.latency()]
        elif parts == ["workers"]:
            views = workers.workers(admin)
            if r.query.get("ask") == "1":
                workers.ask(admin, views)
            data = [v.to_dict() for v in views]
        elif parts == ["limits"]:
            data = [t.to_dict() for t in limits.limits(admin, _top(r.query.get("top")))]
        elif parts == ["schedules"]:
            data = [s.to_dict() for s in admin.schedules()]
        elif parts in (["tasks"], ["history"]):
            return ops_web.get(self, r, parts, 0) or ("404 Not Found", _TEXT, "no such page")
        elif len(parts) == 2 and parts[0] == "jobs":
            data = self._page(self._listing_view(r, parts[1])).to_dict()
        elif parts[:1] == ["job"] and (len(parts) >= 2 or "id" in r.query):
            job_id = r.query["id"] if "id" in r.query else r.path[len("/api/job/"):]
            result = admin.result(job_id)
            data = {**admin.show(job_id).to_dict(),
                    "result": None if result is None else result.to_dict()}
        else:
            raise HttpError("404 Not Found", "no such page")
        return "200 OK", [("Content-Type", "application/json")], json.dumps(data, default=str)

    def _login(self, r: Request) -> tuple[str, list[tuple[str, str]], str]:
        """Ask the browser for the operator's credentials, then back to the dashboard."""
        if self.access.read_only:
            raise HttpError("404 Not Found", "the dashboard is read-only (no plus_admin_token): "
                                             "there is nothing to log in to")
        if r.who.role != OPERATOR:
            raise HttpError("401 Unauthorized", "log in with plus_admin_token as the "
                            "password (any user name)", _CHALLENGE)
        if not r.who.bearer:  # a new session, whatever the browser held
            r.session = None
            self._form_token(r)
        return _redirect(r.urls())

    def _logout(self, r: Request) -> tuple[str, list[tuple[str, str]], str]:
        """End this browser's session (a form of its own pages posted it)."""
        assert self.sessions is not None
        if r.session is not None:
            self.sessions.end(r.session)
        assert self.access.admin_token is not None  # (sessions exist only with it)
        r.new_cookie += [session_header("", r.environ),
                         logged_out_header(r.environ, self.access.admin_token)]
        return ("200 OK", [("Content-Type", "text/plain; charset=utf-8")],
                f"logged out: the next page (or {r.urls('/login')}) asks for the token again")

    # -- sessions and messages ----------------------------------------------------------
    def _form_token(self, r: Request) -> str | None:
        """The form token of this operator's browser (a new session if it has none); None
        for anyone else: no action forms for them."""
        if self.sessions is None or r.who.role != OPERATOR:
            return None
        if r.session is None:
            r.session, cookie = self.sessions.start()
            r.new_cookie.append(session_header(cookie, r.environ))
        return self.sessions.form_token(r.session)

    def _message(self, r: Request) -> str:
        msg = r.query.get("msg", "")
        return msg if self.access.signed(msg, r.query.get("sig", "")) else ""

    def _done(self, location_of: Callable[..., str], text: str
              ) -> tuple[str, list[tuple[str, str]], str]:
        text = text if len(text) <= MAX_MESSAGE else text[:MAX_MESSAGE - 3] + "..."
        return _redirect(location_of(msg=text, sig=self.access.sign(text)), text)

    # -- changes ----------------------------------------------------------------------------
    def _post(self, r: Request) -> tuple[str, list[tuple[str, str]], str]:
        if self.access.read_only:
            raise HttpError("403 Forbidden",
                            "the dashboard is read-only: set plus_admin_token (a secret of at "
                            "least 16 characters) in the app's configuration to allow retry, "
                            "discard, cancel and worker control")
        if r.who.role != OPERATOR:
            raise HttpError("401 Unauthorized",
                            "authentication required: the plus_admin_token secret as the HTTP "
                            "Basic password (any user) or as 'Authorization: Bearer <token>'",
                            _CHALLENGE)
        problem = self.access.cross_site_problem(r.environ)
        if problem is not None:
            raise HttpError("403 Forbidden", problem)
        form = self._form(r.environ)
        token = form.get("token", [""])[-1]
        assert self.sessions is not None  # (not read-only)
        if not r.who.bearer and not self.sessions.form_token_ok(r.session, token):
            raise HttpError("403 Forbidden", "missing, wrong or expired form token: reload "
                                             "the page and try again (a form is good in the "
                                             "browser that loaded it, for an hour)")
        path = r.path
        if path == "/logout":
            return self._logout(r)
        if path.startswith("/jobs/") and path.endswith("/bulk"):
            return self._bulk(r, path[len("/jobs/"):-len("/bulk")], form)
        if path.startswith("/errors/"):
            answer = ops_web.post(self, r, path[len("/errors/"):], form)
            if answer is None:
                raise HttpError("404 Not Found", "no such operation")
            return answer
        if path.startswith("/workers/"):
            node, _, action = path[len("/workers/"):].rpartition("/")
            return self._worker_action(r, node, action, form)
        if path.startswith("/schedules/"):
            name, _, action = path[len("/schedules/"):].rpartition("/")
            return self._schedule_action(r, name, action)
        if path.startswith("/queues/"):
            name, _, action = path[len("/queues/"):].rpartition("/")
            return self._queue_action(r, name, action)
        if path == "/job" or path.startswith("/job/"):
            if "id" in r.query:
                job_id, action = r.query["id"], path[len("/job/"):]
            else:
                job_id, _, action = path[len("/job/"):].rpartition("/")
            return self._job_action(r, job_id, action, form)
        raise HttpError("404 Not Found", "no such operation")

    @staticmethod
    def _form(environ: Environ) -> dict[str, list[str]]:
        text = str(environ.get("CONTENT_LENGTH") or "").strip()
        if not text:
            return {}
        if not text.isdigit() or len(text) > 12:
            raise HttpError("400 Bad Request", "bad Content-Length")
        length = int(text)
        if length > MAX_FORM_BYTES:
            raise HttpError("413 Content Too Large",
                            f"form too large (at most {MAX_FORM_BYTES} bytes)")
        body = environ["wsgi.input"].read(length) if length else b""
        return _fields(body.decode("utf-8", "replace"))

    def _job_action(self, r: Request, job_id: str, action: str, form: dict[str, list[str]]
                    ) -> tuple[str, list[tuple[str, str]], str]:
        admin = self.admin()
        if action == "terminate":
            if form.get("confirm", [""])[-1] != "1":
                token = form.get("token", [""])[-1]
                detail = admin.show(job_id)
                body = pages.confirm_action(
                    f"Stop running job {job_id} ({detail.summary.name})?",
                    "Celery's revoke with terminate: the worker running it kills the process "
                    "running it (prefork; other pools cannot stop a running task, which then "
                    "finishes) and the task is marked REVOKED.",
                    r.urls.job(job_id, "terminate"), token, "stop it", r.urls.job(job_id))
                return self._html(r, "confirm", body)
            result = admin.terminate(job_id)
            text = (f"asked the workers to stop {job_id} (revoke, terminate)" if result.changed
                    else f"{job_id}: {result.state}, not running; nothing to stop")
            return self._done(lambda **q: r.urls.job(job_id, **q), text)
        operation = {"retry": admin.retry, "discard": admin.discard, "cancel": admin.cancel}
        if action not in operation:
            raise HttpError("404 Not Found", "no such operation")
        result = operation[action](job_id)
        text = (f"{action}: {result.previous} -> {result.state}" if result.changed
                else result.message)
        return self._done(lambda **q: r.urls.job(job_id, **q), text)

    def _schedule_action(self, r: Request, name: str, action: str
                         ) -> tuple[str, list[tuple[str, str]], str]:
        if action not in ("pause", "resume"):
            raise HttpError("404 Not Found", "no such operation")
        admin = self.admin()
        try:
            entry = (admin.pause_schedule(name) if action == "pause"
                     else admin.resume_schedule(name))
        except ScheduleNotFound as exc:
            raise HttpError("404 Not Found", str(exc)) from None
        text = f"{'paused' if entry.paused else 'resumed'} {entry.name}"
        return self._done(lambda **q: r.urls("/schedules", **q), text)

    def _queue_action(self, r: Request, name: str, action: str
                      ) -> tuple[str, list[tuple[str, str]], str]:
        if action not in ("pause", "resume") or not name:
            raise HttpError("404 Not Found", "no such operation")
        admin = self.admin()
        done = admin.pause_queue(name) if action == "pause" else admin.resume_queue(name)
        text = (f"paused queue {done.queue}: no worker claims its jobs (running ones finish)"
                if done.paused else f"resumed queue {done.queue}")
        return self._done(lambda **q: r.urls("/", **q), text)

    def _worker_action(self, r: Request, node: str, action: str, form: dict[str, list[str]]
                       ) -> tuple[str, list[tuple[str, str]], str]:
        if action not in ("stop", "shutdown"):
            raise HttpError("404 Not Found", "no such operation")
        admin = self.admin()
        if admin.app is None:
            raise HttpError("400 Bad Request", "worker control needs the Celery app (its "
                                               "remote control), not a broker URL")
        view = workers.find(admin, node)
        if view is None:
            raise HttpError("404 Not Found", f"no worker {shown(node, 100)} in the store's "
                                             "worker records")
        if form.get("confirm", [""])[-1] != "1":
            token = form.get("token", [""])[-1]
            if action == "stop":
                question = f"Stop {node} taking work?"
                detail = (f"It stops consuming {', '.join(view.queues or []) or 'its queues'} "
                          "(Celery's cancel_consumer): the jobs it holds finish, it takes no "
                          "new one, and it keeps running until you shut it down.")
            else:
                question = f"Shut down {node}?"
                detail = ("Celery's warm shutdown: it takes no new job, the running ones "
                          "finish, then it exits; what it prefetched goes back to the store.")
            body = pages.confirm_action(question, detail, r.urls.workers(node, action), token,
                                        "stop taking work" if action == "stop" else "shut down",
                                        r.urls.workers())
            return self._html(r, "confirm", body)
        if action == "stop":
            queues = workers.stop_taking_work(admin, view)
            text = f"asked {node} to stop consuming {', '.join(queues) or 'nothing'}"
        else:
            workers.shutdown(admin, view)
            text = f"asked {node} to shut down (warm)"
        return self._done(lambda **q: r.urls("/workers", **q), text)

    def _bulk(self, r: Request, state: str, form: dict[str, list[str]]
              ) -> tuple[str, list[tuple[str, str]], str]:
        """A bulk action from a listing (see the module docstring)."""
        urls = r.urls
        if state not in STATES:
            raise HttpError("404 Not Found", f"no {shown(state)} listing")
        action, _, target = form.get("do", [""])[-1].partition(":")
        allowed = (pages.SELECTED_ACTIONS if target == "selected" else
                   pages.SCOPE_ACTIONS if target == "scope" else {}).get(state, ())
        if action not in allowed:
            raise ValueError(f"no bulk action {shown(action or '?')}:{shown(target or '?')} "
                             f"on {state} jobs")
        filters = {k: v[-1] for k, v in form.items() if k in pages.FILTER_FIELDS and v[-1]}
        bulk = Bulk(state, action, target,
                    tuple(dict.fromkeys(form.get("id", []))) if target == "selected" else (),
                    {k: v for k, v in filters.items() if k in pages.SCOPE_FIELDS})
        check_ids(action, bulk.ids)  # (before the confirmation page offers the action)
        back = {**(filters if target == "selected" else bulk.scope)}
        if target == "selected" and not bulk.ids:
            return self._done(lambda **q: urls.jobs(state, **back, **q), "no job selected")
        older = _older_than(filters)
        if bulk.needs_confirmation and form.get("confirm", [""])[-1] != "1":
            matched = len(bulk.ids) if target == "selected" else self.admin().count_matching(
                state, **self._filter_args(bulk, older))
            body = pages.confirm(urls, bulk, matched, form.get("token", [""])[-1])
            return self._html(r, "confirm", body)
        result = self._run_bulk(bulk, older)
        return self._done(lambda **q: urls.jobs(state, **back, **q), _bulk_message(bulk, result))

    def _filter_args(self, bulk: Bulk, older: float | None) -> dict[str, Any]:
        """A whole-filter action's listing filters, as admin/filter_actions.py takes them."""
        until: api.Moment = _moment("until", bulk.scope.get("until"))
        if older is not None:
            cutoff = dt.timedelta(seconds=older)
            until = cutoff if until is None else _earlier(self.admin(), until, cutoff)
        return {"task": bulk.scope.get("task"), "queue": bulk.scope.get("queue"),
                "since": _moment("since", bulk.scope.get("since")), "until": until,
                "text": bulk.scope.get("text")}

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
        if bulk.action not in ("retry", "purge") or any(
                bulk.scope.get(k) for k in pages.SCOPE_FIELDS
                if k not in pages.STORE_SCOPE_FIELDS):
            # discard / cancel, or a text or time filter: every match, a batch at a time
            return admin.act_on_filter(bulk.action, bulk.state,
                                       **self._filter_args(bulk, older))
        scope: dict[str, Any] = {"task": bulk.scope.get("task"),
                                 "queue": bulk.scope.get("queue"), "older_than": older}
        unscoped = all(v is None for v in scope.values())  # confirmed on the page: all=True
        if bulk.action == "retry":
            return admin.retry_many(**scope, all=unscoped)
        return admin.purge(bulk.state, **scope, all=unscoped)


_TEXT = [("Content-Type", "text/plain; charset=utf-8")]


def _redirect(location: str, text: str = "") -> tuple[str, list[tuple[str, str]], str]:
    return "303 See Other", [("Location", location), *_TEXT], text


def _moment(name: str, text: str | None) -> dt.datetime | dt.timedelta | None:
    if not text:
        return None
    try:
        return parse_moment(text)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from None


def _earlier(admin: api.Admin, a: api.Moment, b: dt.timedelta) -> api.Moment:
    """The earlier of an ``until`` and an ``older_than`` cutoff."""
    if isinstance(a, dt.timedelta):
        return max(a, b)
    if isinstance(a, dt.datetime):
        cutoff = dt.datetime.fromtimestamp(admin.store.now_ms() / 1000 - b.total_seconds(),
                                           tz=dt.timezone.utc)
        return min(a, cutoff)
    return a


def _older_than(filters: dict[str, str] | Any) -> float | None:
    """The ``older_than`` filter in seconds (``90s``, ``15m``, ``2h``, ``7d``)."""
    text = filters.get("older_than")
    if not text:
        return None
    try:
        return parse_duration(text)
    except ValueError as exc:
        raise ValueError(f"older_than: {exc}") from None


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


def make_app(target: Any, admin_token: str | None = None, **access: Any) -> Dashboard:
    """The dashboard for ``target``: a Celery app or a ``plus+...`` broker URL.

    ``admin_token`` (and ``read_token``, ``public_read``, ``allowed_hosts``) default to the
    app's ``plus_admin_*`` settings; without an admin token the dashboard is read-only."""
    return Dashboard(target, admin_token, **access)


__all__ = ["Dashboard", "Mount", "make_app", "metrics_text"]
