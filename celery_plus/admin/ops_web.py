"""The dashboard's operator routes (``web.py`` hands them over): ``GET /errors``,
``GET /errors/jobs?type=&message=``, ``GET /tasks?window=1h`` (and ``/api/tasks``),
``GET /history?queue=&range=1h`` (and ``/api/history``),
``POST /errors/retry`` and ``/errors/discard`` (a confirmation page with the count first, then
the action with ``confirm=1``). Access, the form token and the origin checks are ``web.py``'s,
done before these run; ``dash`` is the :class:`~celery_plus.admin.web.Dashboard`.
"""

from __future__ import annotations

import json
from typing import Any

from celery_plus.admin import ops_pages
from celery_plus.admin.params import parse_int, shown
from celery_plus.admin.queue_history import DEFAULT_RANGE, RANGES
from celery_plus.admin.task_stats import WINDOWS
from celery_plus.model.admin import MAX_PER_PAGE

Answer = tuple[str, list[tuple[str, str]], str]
#: What a handler returns: an answer, or None for a path it does not serve (web.py: 404).
Handled = Answer | None
#: Groups the errors page shows.
GROUPS_SHOWN = 100


def _group_key(values: dict[str, str]) -> tuple[str, str]:
    exc_type, msg = values.get("type"), values.get("message")
    if exc_type is None or (msg is None and values.get("empty") != "1"):
        raise ValueError("type and message: the group's exception type and message, as the "
                         "errors page links them")
    return exc_type, msg or ""


def get(dash: Any, r: Any, parts: list[str], refresh: int) -> Handled:
    admin = dash.admin()
    if parts == ["errors"]:
        body = ops_pages.errors_page(r.urls, admin.error_groups(GROUPS_SHOWN),
                                     dash._message(r), dash._form_token(r))
        return dash._html(r, "errors", body, refresh,
                          lambda n: r.urls("/errors", refresh=n or None))
    if parts == ["errors", "jobs"]:
        values = {k: r.text(k) for k in ("type", "message", "empty") if k in r.query}
        exc_type, msg = _group_key(values)
        page = parse_int("page", r.query["page"], 1, 1_000_000) if r.query.get("page") else 1
        per_page = (parse_int("per_page", r.query["per_page"], 1, MAX_PER_PAGE)
                    if r.query.get("per_page") else 50)
        found = admin.error_group_jobs(exc_type, msg, page, per_page)
        body = ops_pages.group_jobs_page(r.urls, exc_type, msg, found, dash._message(r),
                                         dash._form_token(r))
        return dash._html(r, f"errors: {exc_type}", body, refresh,
                          lambda n: ops_pages.group_url(r.urls, exc_type, msg,
                                                        refresh=n or None))
    if parts == ["tasks"]:
        window = r.query.get("window") or "1h"
        if window not in WINDOWS:
            raise ValueError(f"window: one of {', '.join(WINDOWS)} (got {shown(window)})")
        found = admin.task_breakdown(WINDOWS[window])
        if r.path.startswith("/api/"):
            return "200 OK", [("Content-Type", "application/json")], json.dumps(found.to_dict())
        return dash._html(r, "tasks", ops_pages.tasks_page(r.urls, found, window), refresh,
                          lambda n: r.urls("/tasks", window=window, refresh=n or None))
    if parts == ["history"]:
        key = r.query.get("range") or DEFAULT_RANGE
        if key not in RANGES:
            raise ValueError(f"range: one of {', '.join(RANGES)} (got {shown(key)})")
        queue = r.text("queue", 1000) or None
        history = admin.queue_history(queue, RANGES[key])
        if r.path.startswith("/api/"):
            return ("200 OK", [("Content-Type", "application/json")],
                    json.dumps(history.to_dict()))
        return dash._html(r, "queue history", ops_pages.history_page(r.urls, history, key),
                          refresh, lambda n: r.urls("/history", queue=queue, range=key,
                                                    refresh=n or None))
    return None


def post(dash: Any, r: Any, action: str, form: dict[str, list[str]]) -> Handled:
    if action not in ops_pages.GROUP_VERBS:
        return None
    exc_type, msg = _group_key({k: v[-1] for k, v in form.items() if v})
    admin = dash.admin()
    if form.get("confirm", [""])[-1] != "1":
        count = admin.error_group_jobs(exc_type, msg, per_page=1).total
        body = ops_pages.confirm_group(r.urls, action, exc_type, msg, count,
                                       form.get("token", [""])[-1])
        return dash._html(r, "confirm", body)
    result = (admin.retry_group(exc_type, msg) if action == "retry"
              else admin.discard_group(exc_type, msg))
    verb = {"retry": "retried", "discard": "discarded"}[action]
    text = (f"{verb} {len(result.changed)} of {result.matched} dead letters of "
            f"{shown(exc_type, 100)}: {shown(msg, 100)}")
    if result.conflicts:
        text += f"; {len(result.conflicts)} not retried (unique key held by another job)"
    return dash._done(lambda **q: r.urls("/errors", **q), text)
