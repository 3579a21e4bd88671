"""The admin on the command line: ``celery-plus dlq ...``, ``jobs``, ``cancel``, ``store-status``,
``schedules``, ``queues`` (and ``admin``, the web dashboard of ``admin/web.py``; ``dashboard``
is its old name).

Registered on the ``plus`` group (``celery_plus/cli/__init__.py``), so they run as
``celery-plus dlq ls -A proj`` and ``celery -A proj plus dlq ls``. They use the Python API
(:mod:`celery_plus.admin.api`) and nothing else.

* People get plain aligned tables; ``--json`` prints one JSON document for scripts.
* Exit codes: 0 done (including an idempotent no-op, reported as such); 1 a job not found, a
  retry conflict, or a bulk action declined at the prompt; 2 usage (bad option, unscoped bulk
  action without ``--all``, an app whose broker is not a celery-plus store).
* Bulk actions (``dlq retry`` / ``dlq purge`` by scope) ask for confirmation unless ``--yes``;
  interrupted (Ctrl-C), they say how many jobs they changed already and exit 130.
* Everything a job carries (task and queue names, arguments, errors) is shown with its
  control and bidirectional characters spelled out (``\x1b``, ``\u202e``: :mod:`.text`), so
  no job can clear the operator's screen, retitle the terminal or reorder a line; ``--json``
  escapes them as JSON does.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import click
from celery.bin.base import CeleryCommand
from celery.exceptions import ImproperlyConfigured

from celery_plus.admin import api, deadline
from celery_plus.admin.cuts import WALK_WINDOW, cuts, unindexed_note
from celery_plus.admin.job_states import shown_state
from celery_plus.admin.params import MAX_PAGE, parse_duration, parse_moment
from celery_plus.admin.queue_history import DEFAULT_RANGE, RANGES
from celery_plus.admin.schedules import Schedule, ScheduleNotFound
from celery_plus.admin.search import TEXT_WINDOW
from celery_plus.admin.text import age, one_line, visible, when
from celery_plus.model.admin import (
    BATCH,
    COUNTED,
    PURGEABLE,
    QUEUE_COUNTED,
    STATES,
    AdminError,
    BulkResult,
    JobDetail,
    JobNotFound,
    JobSummary,
    OpResult,
    Page,
    RetryConflict,
    Status,
    UnscopedOperation,
    unreachable_errors,
)
from celery_plus.model.capped import count_text
from celery_plus.settings import BY_NAME as _SETTINGS


class Duration(click.ParamType):
    name = "duration"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> float:
        if isinstance(value, (int, float)):
            return float(value)
        try:
            return parse_duration(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


class Moment(click.ParamType):
    name = "time"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> dt.datetime | dt.timedelta:
        if isinstance(value, (dt.datetime, dt.timedelta)):
            return value
        try:
            return parse_moment(str(value))
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


# -- output -------------------------------------------------------------------------------
def _emit_json(data: Any) -> None:
    # ensure_ascii: every control or bidirectional character is a \uXXXX escape.
    click.echo(json.dumps(data, indent=2, default=str, ensure_ascii=True))


def _echo(text: str, err: bool = False) -> None:
    """Print text for a person: hidden characters spelled out (newlines kept)."""
    click.echo(visible(text, keep="\n"), err=err)


def clip(text: str, width: int) -> str:
    """One line of at most ``width`` characters, hidden characters spelled out."""
    text = one_line(text)
    return text if len(text) <= width else text[:width - 3] + "..."


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """Plain text columns, left-aligned, two spaces apart (each cell on one line)."""
    cells = [[str(h) for h in headers], *[[one_line(c) for c in row] for row in rows]]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
                     for row in cells)


_TIME_LABEL = {"completed": "FINISHED", "failed": "FAILED", "canceled": "CANCELED",
               "discarded": "DISCARDED", "running": "STARTED"}


def _error(row: JobSummary) -> str:
    if not (row.exc_type or row.exc_message):
        return row.reason
    return f"{row.exc_type}: {row.exc_message}" if row.exc_type else row.exc_message


def page_text(page: Page) -> str:
    if not page.items:
        return (f"no {page.state} jobs" + (f" on page {page.page}" if page.total else "")
                + search_notes(page))
    finished = page.state in ("completed", "failed", "canceled", "discarded")
    headers = ["TASK ID", "TASK", "QUEUE", _TIME_LABEL.get(page.state, "ENQUEUED"), "DL",
               "ERROR" if page.state == "failed" else "ARGS"]
    rows = [[r.id, r.name or "-", r.queue, when(r.at_ms), r.deliveries,
             clip(_error(r) if page.state == "failed" else r.args_repr, 60)]
            for r in page.items]
    if page.state in ("running", "blocked"):  # reserved / rate-limited (admin/job_states.py)
        headers.insert(3, "STATE")
        for row, item in zip(rows, page.items, strict=True):
            row.insert(3, shown_state(item))
    if finished and page.state != "failed":
        headers.append("REASON")
        for row, item in zip(rows, page.items, strict=True):
            row.append(item.reason or "-")
    footer = (f"page {page.page}/{max(page.pages, 1)}, {count_text(page.total)} {page.state} "
              f"job{'s' if page.total != 1 else ''}")
    return table(headers, rows) + "\n" + footer + search_notes(page)


def search_notes(page: Page) -> str:
    """Lines saying what a search did besides its rows (admin/search.py)."""
    notes = []
    if page.by_id:
        notes.append("the job with this id")
    notes += [f"{cut.said} ({cut.option}: all of them)" for cut in cuts(page)]
    if page.task_names:
        notes.append("tasks whose name contains it (--task NAME to list one): "
                     + ", ".join(page.task_names))
    return "".join("\n" + note for note in notes)


def detail_text(d: JobDetail) -> str:
    """A job for a person; every value one line with hidden characters spelled out (the
    traceback keeps its lines)."""
    s, v = d.summary, one_line
    lines = [
        f"Task id:      {v(d.id)}", f"Task:         {v(s.name or '-')}",
        f"State:        {shown_state(d)}", f"Queue:        {v(s.queue)}",
        f"Priority:     {d.priority}",
        f"Deliveries:   {s.deliveries}" + (f" of {d.max_deliveries}" if d.max_deliveries else ""),
        f"Enqueued:     {when(s.enqueued_ms)}",
    ]
    if s.due_ms:
        lines.append(f"Due:          {when(s.due_ms)}")
    if d.started_ms:
        by = f" by {v(d.worker)}" if d.worker else ""
        lines.append(f"Started:      {when(d.started_ms)}{by}")
    if d.finished_ms:
        lines.append(f"Finished:     {when(d.finished_ms)}")
    if s.reason:
        lines.append(f"Reason:       {v(s.reason)}")
    if s.exc_type or s.exc_message:
        lines.append(f"Last error:   {v(_error(s))}")
    if d.unique_lock:
        held = d.unique_holder or "nobody"
        lines.append(f"Unique key:   {v(d.unique_lock)} ({v(d.unique_window)} window; held by "
                     f"{v(held)})")
    if d.concurrency_group:
        lines.append(f"Concurrency:  {v(d.concurrency_group)} (limit {d.concurrency_limit})")
    if d.decode_error:
        lines += ["", f"Message:      cannot be decoded: {v(d.decode_error)}",
                  f"Raw message:  {clip(d.raw_message, 500)}"]
    else:
        lines += ["", f"Args:         {json.dumps(d.args, default=str)}",
                  f"Kwargs:       {json.dumps(d.kwargs, default=str)}",
                  "Headers:      " + "\n              ".join(
                      f"{v(k)}: {json.dumps(x, default=str)}" for k, x in d.headers.items()
                      if x not in (None, "", [], {}) and k not in ("id", "task"))]
    if d.history:
        rows = [[h.get("delivery", ""), when(h.get("finished_ms")), h.get("outcome", ""),
                 h.get("worker") or "-",
                 clip(": ".join(str(x) for x in (h.get("exc_type"), h.get("exc_message"))
                                if x), 60)]
                for h in d.history]
        lines += ["", "History:", table(["#", "AT", "OUTCOME", "WORKER", "ERROR"], rows)]
    if d.traceback:
        lines += ["", "Traceback:", visible(d.traceback.rstrip(), keep="\n")]
    return "\n".join(lines)


def status_text(st: Status) -> str:
    now = st.now_ms
    rows = [[q.queue, *(count_text(getattr(q, s)) for s in QUEUE_COUNTED),
             age(None if q.oldest_waiting_ms is None else (now - q.oldest_waiting_ms) / 1000)]
            for q in st.queues]
    out = [table(["QUEUE", *(s.upper() for s in QUEUE_COUNTED), "OLDEST WAITING"], rows)
           if rows else "no queued, running or failed jobs"]
    if st.groups:
        out += ["", table(["CONCURRENCY GROUP", "RUNNING", "LIMIT", "BLOCKED"],
                          [[g.group, g.running, g.limit, g.blocked] for g in st.groups])]
    c = st.counts
    out += ["", f"dead letters: {count_text(st.dead_letters)}",
            f"oldest waiting job: {age(st.oldest_waiting_age_s)}",
            f"completed: {count_text(c.completed)}  canceled: {count_text(c.canceled)}  "
            f"discarded: {count_text(c.discarded)}"]
    return "\n".join([*out, *filter(None, [unindexed_note(st.unindexed)])])


def _op_text(result: OpResult) -> str:
    if result.changed:
        verb = {"retry": "retried", "discard": "discarded", "cancel": "canceled"}[result.action]
        return f"{verb} {result.job_id} ({result.previous} -> {result.state})"
    return result.message


# -- plumbing ------------------------------------------------------------------------------
@contextmanager
def _admin(ctx: click.Context) -> Iterator[api.Admin]:
    app = ctx.obj.app if ctx.obj is not None else None
    if app is None:
        raise click.UsageError("no app: give -A proj")
    unreachable = unreachable_errors()
    try:
        admin = api.connect(app)
    except (AdminError, ImproperlyConfigured) as exc:  # (a setting the store refuses)
        raise click.UsageError(visible(str(exc))) from None
    except unreachable as exc:
        raise _unreachable(exc) from None
    try:
        yield admin
    except UnscopedOperation as exc:
        raise click.UsageError(str(exc)) from None
    except ValueError as exc:
        if isinstance(exc, AdminError):
            raise
        raise click.UsageError(str(exc)) from None
    except unreachable as exc:
        raise _unreachable(exc) from None
    finally:
        with contextlib.suppress(*unreachable):
            admin.close()


def _unreachable(exc: BaseException) -> click.ClickException:
    """The store cannot be reached: said in one line (exit 1), not a traceback."""
    return click.ClickException(f"the store cannot be reached: {type(exc).__name__}: "
                                f"{clip(str(exc), 300)}")


def _per_id(ctx: click.Context, ids: Sequence[str], operation: Callable[[str], OpResult],
            as_json: bool) -> None:
    """Run ``operation`` on each id; exit 1 if any was not found or conflicted."""
    results: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    for job_id in ids:
        try:
            result = operation(job_id)
        except JobNotFound as exc:
            errors.append({"id": job_id, "error": "not found", "message": str(exc)})
            if not as_json:
                _echo(f"error: {exc}", err=True)
            continue
        except RetryConflict as exc:
            errors.append({"id": job_id, "error": "conflict", "holder": exc.holder_id,
                           "lock": exc.lock, "message": str(exc)})
            if not as_json:
                _echo(f"error: {exc}", err=True)
            continue
        results.append(result.to_dict())
        if not as_json:
            _echo(_op_text(result))
    if as_json:
        _emit_json({"results": results, "errors": errors})
    if errors:
        ctx.exit(1)


def _bulk_text(result: BulkResult, what: str) -> str:
    verb = {"retry": "retried", "purge": "purged", "discard": "discarded",
            "cancel": "canceled"}[result.action]
    text = f"{verb} {len(result.changed)} of {result.matched} {what}"
    for job_id, holder in result.conflicts:
        text += f"\nconflict: {job_id} not retried, its unique key is held by {holder}"
    return text


def settings_hosts_ok(names: Sequence[str]) -> bool:
    """Whether ``names`` are host names as ``plus_admin_allowed_hosts`` takes them."""
    return bool(_SETTINGS["plus_admin_allowed_hosts"].check(list(names)))


@contextmanager
def _interruptible(ctx: click.Context, result: BulkResult, what: str, as_json: bool,
                   seconds: float | None = None) -> Iterator[None]:
    """Run a bulk operation that fills ``result`` batch by batch; on Ctrl-C, say what it
    did already and exit 130 (the usual code of a command ended by SIGINT). With
    ``seconds``, it stops at the first batch past that deadline (:mod:`..admin.deadline`),
    says what it did and exits 1."""
    try:
        with (deadline.bounded(seconds) if seconds is not None
              else contextlib.nullcontext()):
            yield
    except deadline.Stopped as exc:
        if as_json:
            _emit_json(result.to_dict())
        _echo(deadline.stopped_text(exc), err=True)
        ctx.exit(1)
    except KeyboardInterrupt:
        text = (f"interrupted: {_bulk_text(result, what)} before Ctrl-C (a batch of up to "
                f"{BATCH} more may have been changed as well; run the command again to "
                "finish)")
        if as_json:
            _emit_json({**result.to_dict(), "interrupted": True})
        _echo(text, err=True)
        ctx.exit(130)


def _scope_words(task: str | None, queue: str | None, older_than: float | None,
                 every: bool) -> str:
    words = [f"task {task}" if task else "", f"queue {queue}" if queue else "",
             f"older than {age(older_than)}" if older_than is not None else ""]
    scoped = ", ".join(w for w in words if w)
    return scoped or ("ALL" if every else "")


def _check_bulk(action: str, task: str | None, queue: str | None, older_than: float | None,
                every: bool) -> None:
    if not (task or queue or older_than is not None or every):
        raise click.UsageError(
            f"{action} needs a scope: --task, --queue or --older-than (or --all for every "
            "job of the state)")


def _filters(func: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed([
        click.option("--task", help="Only jobs of this task name."),
        click.option("--queue", help="Only jobs of this queue."),
        click.option("--since", type=Moment(),
                      help="Only jobs at or after this time (ISO 8601, UTC) or age (15m, 2h)."),
        click.option("--until", type=Moment(), help="Only jobs at or before this time or age."),
        click.option("--text", help="A job id, or text in the task name, the arguments or "
                     "the error (any case)."),
        click.option("--text-limit", type=click.IntRange(0), default=TEXT_WINDOW,
                     show_default=True,
                     help="Search --text in this many jobs of the other filters (the newest "
                          "first); 0: in all of them (slow on a large store)."),
        click.option("--walk-limit", type=click.IntRange(0), default=WALK_WINDOW,
                     show_default=True,
                     help="Redis, a task or time filter over more than 10,000 waiting jobs: "
                          "look at this many of them (in the listing's order); 0: all of "
                          "them (seconds at a million)."),
        click.option("--page", type=click.IntRange(1, MAX_PAGE), default=1,
                     show_default=True),
        click.option("--sort", "order", type=click.Choice(api.ORDERS), default="newest",
                     show_default=True, help="Newest or oldest first."),
        click.option("--per-page", type=click.IntRange(1, 1000), default=50, show_default=True),
        click.option("--json", "as_json", is_flag=True, help="Print JSON."),
    ]):
        func = option(func)
    return func


def _scope_options(func: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed([
        click.option("--task", help="Only jobs of this task name."),
        click.option("--queue", help="Only jobs of this queue."),
        click.option("--older-than", type=Duration(),
                     help="Only jobs that finished at least this long ago (90s, 15m, 2h, 7d)."),
        click.option("--all", "every", is_flag=True, help="No scope: every job of the state."),
        click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation."),
        click.option("--json", "as_json", is_flag=True, help="Print JSON."),
    ]):
        func = option(func)
    return func


def _list(ctx: click.Context, state: str, as_json: bool, **filters: Any) -> None:
    filters["text_limit"] = filters.get("text_limit") or None
    filters["walk_limit"] = filters.get("walk_limit") or None
    with _admin(ctx) as admin:
        page = admin.jobs(state, **filters)
    if as_json:
        _emit_json(page.to_dict())
    else:
        _echo(page_text(page))


# -- commands ----------------------------------------------------------------------------
@click.group(name="dlq")
def dlq() -> None:
    """Dead letters: list, show, retry, discard, purge."""


@dlq.command(cls=CeleryCommand, name="ls")
@_filters
@click.pass_context
def dlq_ls(ctx: click.Context, as_json: bool, **filters: Any) -> None:
    """List dead letters (failed jobs), newest first."""
    _list(ctx, "failed", as_json, **filters)


@dlq.command(cls=CeleryCommand, name="show")
@click.argument("task_id")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def dlq_show(ctx: click.Context, task_id: str, as_json: bool) -> None:
    """Show one job: message, attempts, error history, traceback (any state)."""
    with _admin(ctx) as admin:
        try:
            detail = admin.show(task_id)
        except JobNotFound as exc:
            if as_json:
                _emit_json({"id": task_id, "error": "not found", "message": str(exc)})
            else:
                _echo(f"error: {exc}", err=True)
            ctx.exit(1)
    if as_json:
        _emit_json(detail.to_dict())
    else:
        _echo(detail_text(detail))


@dlq.command(cls=CeleryCommand, name="retry")
@click.argument("task_ids", nargs=-1)
@_scope_options
@click.pass_context
def dlq_retry(ctx: click.Context, task_ids: tuple[str, ...], task: str | None,
              queue: str | None, older_than: float | None, every: bool, yes: bool,
              as_json: bool) -> None:
    """Retry dead letters: the given task ids, or every one in a scope (same task id,
    deliveries reset; a unique key held by another job is a conflict)."""
    scoped = bool(task or queue or older_than is not None or every)
    if task_ids and scoped:
        raise click.UsageError("give task ids or a scope (--task/--queue/--older-than/--all), "
                               "not both")
    with _admin(ctx) as admin:
        if task_ids:
            _per_id(ctx, task_ids, admin.retry, as_json)
            return
        _check_bulk("dlq retry", task, queue, older_than, every)
        if not yes:
            scope = _scope_words(task, queue, older_than, every)
            click.confirm(f"Retry the dead letters of {visible(scope)}?", abort=True, err=True)
        result = BulkResult("retry")
        with _interruptible(ctx, result, "dead letters", as_json):
            admin.retry_many(task=task, queue=queue, older_than=older_than, all=every,
                             result=result)
    if as_json:
        _emit_json(result.to_dict())
    else:
        _echo(_bulk_text(result, "dead letters"))
    if result.conflicts:
        ctx.exit(1)


@dlq.command(cls=CeleryCommand, name="discard")
@click.argument("task_ids", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def dlq_discard(ctx: click.Context, task_ids: tuple[str, ...], as_json: bool) -> None:
    """Discard dead letters (kept as 'discarded' until pruned with completed records)."""
    with _admin(ctx) as admin:
        _per_id(ctx, task_ids, admin.discard, as_json)


@dlq.command(cls=CeleryCommand, name="purge")
@click.option("--state", type=click.Choice(PURGEABLE), default="failed", show_default=True,
              help="Records of which state to delete.")
@_scope_options
@click.pass_context
def dlq_purge(ctx: click.Context, state: str, task: str | None, queue: str | None,
              older_than: float | None, every: bool, yes: bool, as_json: bool) -> None:
    """Delete dead letters (or other finished records) in a scope, for good."""
    _check_bulk("dlq purge", task, queue, older_than, every)
    with _admin(ctx) as admin:
        if not yes:
            click.confirm(f"Delete the {state} jobs of "
                          f"{visible(_scope_words(task, queue, older_than, every))} for good?",
                          abort=True, err=True)
        result = BulkResult("purge")
        with _interruptible(ctx, result, f"{state} jobs", as_json):
            admin.purge(state, task=task, queue=queue, older_than=older_than, all=every,
                        result=result)
    if as_json:
        _emit_json(result.to_dict())
    else:
        _echo(_bulk_text(result, f"{state} jobs"))


@click.command(cls=CeleryCommand, name="jobs")
@click.argument("state", required=False, type=click.Choice(STATES))
@_filters
@click.pass_context
def jobs(ctx: click.Context, state: str | None, as_json: bool, **filters: Any) -> None:
    """Count jobs per state, or list the jobs in STATE, newest first."""
    if state is not None:
        _list(ctx, state, as_json, **filters)
        return
    with _admin(ctx) as admin:
        counts = admin.counts()
    if as_json:
        _emit_json(counts.to_dict())
    else:
        _echo(table(["STATE", "JOBS"], [[s, count_text(counts[s])] for s in COUNTED]))


@click.command(cls=CeleryCommand, name="cancel")
@click.argument("task_ids", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def cancel(ctx: click.Context, task_ids: tuple[str, ...], as_json: bool) -> None:
    """Cancel jobs that wait (enqueued, scheduled or blocked); running jobs are not touched."""
    with _admin(ctx) as admin:
        _per_id(ctx, task_ids, admin.cancel, as_json)


@click.command(cls=CeleryCommand, name="store-status")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def status(ctx: click.Context, as_json: bool) -> None:
    """The store: per-queue depth by state, concurrency groups, dead letters, oldest waiting
    job (``celery-plus status`` is Celery's: the workers that reply to a ping)."""
    with _admin(ctx) as admin:
        st = admin.status()
    if as_json:
        _emit_json(st.to_dict())
    else:
        _echo(status_text(st))


@click.command(cls=CeleryCommand, name="admin")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on.")
@click.option("--port", type=click.IntRange(1, 65535), default=8055, show_default=True)
@click.option("--allowed-host", "allowed_hosts", multiple=True, metavar="NAME",
              help="A host name the dashboard answers to besides plus_admin_allowed_hosts "
                   "(repeatable; '.example.com': it and its subdomains).")
@click.option("--trusted-proxy", metavar="ADDRESS",
              help="Address of a reverse proxy whose X-Forwarded-For/-Host/-Proto/-Port "
                   "headers are trusted (e.g. 127.0.0.1).")
@click.pass_context
def admin(ctx: click.Context, host: str, port: int, allowed_hosts: tuple[str, ...],
          trusted_proxy: str | None) -> None:  # pragma: no cover
    """Serve the admin's web dashboard with waitress (on 127.0.0.1 unless --host says
    otherwise). With plus_admin_token set, reading needs it (or plus_admin_read_token) and
    every action needs it, as the HTTP Basic password or a Bearer token; without it the
    dashboard is read-only and open to whoever reaches it. See docs/admin.md."""
    from celery_plus.admin.server import BadAddress, MissingServer, serve

    for name in allowed_hosts:
        if not settings_hosts_ok([name]):
            raise click.BadParameter(f"{visible(name)!r} is not a host name",
                                     param_hint="--allowed-host")
    with _admin(ctx):
        pass  # fail here, as a usage error, if the app has no durable store
    try:
        serve(ctx.obj.app, host, port, allowed_hosts=allowed_hosts,
              trusted_proxy=trusted_proxy)
    except MissingServer as exc:
        raise click.ClickException(str(exc)) from None
    except BadAddress as exc:
        raise click.BadParameter(f"cannot listen on '{visible(host)}' port {port}: {exc}",
                                 param_hint="--host") from None
    except OSError as exc:
        raise click.ClickException(f"cannot serve on {visible(host)}:{port}: "
                                   f"{visible(exc.strerror or exc)}") from None


#: ``celery-plus dashboard``: the name ``admin`` had before; kept, hidden from the help.
dashboard = copy.copy(admin)
dashboard.name = "dashboard"
dashboard.hidden = True
dashboard.help = "Alias of 'celery-plus admin'."

def schedules_text(entries: Sequence[Schedule]) -> str:
    if not entries:
        return "no schedule entries in the store (beat registers them when it starts)"
    return table(["SCHEDULE", "TASK", "EVERY", "STATE", "LAST TICK", "NEXT TICK", "FIRED"],
                 [[visible(s.name), visible(s.task), clip(visible(s.schedule), 40),
                   "paused" if s.paused else "active", when(s.last_due_ms or None),
                   when(s.next_due_ms or None), s.fired] for s in entries])


@click.group(name="schedules")
def schedules() -> None:
    """Beat's periodic schedules in the store: list, pause, resume (docs/schedules.md)."""


@schedules.command(cls=CeleryCommand, name="ls")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def schedules_ls(ctx: click.Context, as_json: bool) -> None:
    """Every entry: its task, schedule, state, last and next tick, jobs fired."""
    with _admin(ctx) as admin:
        entries = admin.schedules()
    if as_json:
        _emit_json([s.to_dict() for s in entries])
    else:
        _echo(schedules_text(entries))


def _set_paused(ctx: click.Context, names: Sequence[str], paused: bool, as_json: bool) -> None:
    """Pause or resume each entry; exit 1 if any was not found."""
    done: list[Schedule] = []
    missing: list[str] = []
    with _admin(ctx) as admin:
        for name in names:
            try:
                done.append(admin.pause_schedule(name) if paused
                            else admin.resume_schedule(name))
            except ScheduleNotFound:
                missing.append(name)
    if as_json:
        _emit_json({"changed": [s.to_dict() for s in done], "not_found": missing})
    else:
        for entry in done:
            _echo(f"{'paused' if paused else 'resumed'} {visible(entry.name)}")
        for name in missing:
            _echo(f"no schedule entry named {visible(name)!r}", err=True)
    if missing:
        ctx.exit(1)


@schedules.command(cls=CeleryCommand, name="pause")
@click.argument("names", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def schedules_pause(ctx: click.Context, names: tuple[str, ...], as_json: bool) -> None:
    """Pause entries: their ticks pass without jobs until resumed."""
    _set_paused(ctx, names, True, as_json)


@schedules.command(cls=CeleryCommand, name="resume")
@click.argument("names", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def schedules_resume(ctx: click.Context, names: tuple[str, ...], as_json: bool) -> None:
    """Resume paused entries from their next tick."""
    _set_paused(ctx, names, False, as_json)


@schedules.command(cls=CeleryCommand, name="rm")
@click.argument("names", nargs=-1, required=True)
@click.pass_context
def schedules_rm(ctx: click.Context, names: tuple[str, ...]) -> None:
    """Delete entries from the store: those no longer in beat_schedule (a configured one is
    registered again, afresh, when a beat starts)."""
    missing = []
    with _admin(ctx) as admin:
        for name in names:
            try:
                admin.forget_schedule(name)
                _echo(f"deleted {visible(name)}")
            except ScheduleNotFound:
                missing.append(name)
                _echo(f"no schedule entry named {visible(name)!r}", err=True)
    if missing:
        ctx.exit(1)


def queue_rows(st: Status, paused: dict[str, int]) -> list[dict[str, Any]]:
    """Each queue with jobs, or paused: its pause state and depth."""
    by_name = {q.queue: q for q in st.queues}
    rows = []
    for name in sorted(set(by_name) | set(paused)):
        q = by_name.get(name)
        rows.append({"queue": name, "paused": name in paused, "paused_ms": paused.get(name),
                     **{s: getattr(q, s) if q else 0
                        for s in ("enqueued", "scheduled", "running", "reserved")}})
    return rows


def queues_text(rows: Sequence[dict[str, Any]]) -> str:
    if not rows:
        return "no queues in the store"
    return table(["QUEUE", "STATE", "PAUSED SINCE", "ENQUEUED", "SCHEDULED", "RUNNING",
                  "RESERVED"],
                 [[visible(r["queue"]), "paused" if r["paused"] else "active",
                   when(r["paused_ms"]), count_text(r["enqueued"]), count_text(r["scheduled"]),
                   count_text(r["running"]), count_text(r["reserved"])] for r in rows])


@click.group(name="queues")
def queues() -> None:
    """Queues in the store: list, pause, resume (docs/admin.md, "Pausing a queue")."""


@queues.command(cls=CeleryCommand, name="ls")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def queues_ls(ctx: click.Context, as_json: bool) -> None:
    """Every queue with jobs, or paused: its state and depth."""
    with _admin(ctx) as admin:
        rows = queue_rows(admin.status(), admin.paused_queues())
    if as_json:
        _emit_json(rows)
    else:
        _echo(queues_text(rows))


def _pause(ctx: click.Context, names: Sequence[str], paused: bool, as_json: bool) -> None:
    with _admin(ctx) as admin:
        done = [admin.pause_queue(name) if paused else admin.resume_queue(name)
                for name in names]
    if as_json:
        _emit_json([d.to_dict() for d in done])
        return
    for d in done:
        _echo(f"{'paused' if paused else 'resumed'} {visible(d.queue)} "
              f"(acknowledged {when(d.acknowledged_ms)} UTC, store clock)")


@queues.command(cls=CeleryCommand, name="pause")
@click.argument("names", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def queues_pause(ctx: click.Context, names: tuple[str, ...], as_json: bool) -> None:
    """Pause queues for every worker: no job of theirs is claimed until resumed (running
    jobs finish; new jobs are accepted and wait)."""
    _pause(ctx, names, True, as_json)


@queues.command(cls=CeleryCommand, name="resume")
@click.argument("names", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def queues_resume(ctx: click.Context, names: tuple[str, ...], as_json: bool) -> None:
    """Resume paused queues: their jobs are claimable at once."""
    _pause(ctx, names, False, as_json)


@queues.command(cls=CeleryCommand, name="history")
@click.option("--queue", default=None, help="One queue (default: every queue added up).")
@click.option("--range", "range_key", type=click.Choice(list(RANGES)), default=DEFAULT_RANGE,
              show_default=True, help="How far back.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def queues_history(ctx: click.Context, queue: str | None, range_key: str,
                   as_json: bool) -> None:
    """Jobs enqueued and the oldest one's wait, one sample a minute (recorded by the
    workers' maintenance, kept a day), oldest first; the last line is now."""
    with _admin(ctx) as admin:
        found = admin.queue_history(queue, RANGES[range_key])
    if as_json:
        _emit_json(found.to_dict())
        return
    _echo(table(["SAMPLED", "ENQUEUED", "OLDEST WAITED"],
                [[when(p.at_ms) + (" (now)" if p.live else ""), p.waiting,
                  "-" if p.oldest_wait_s is None else age(p.oldest_wait_s)]
                 for p in found.points]))


#: The commands the ``plus`` group registers.
COMMANDS: tuple[click.Command, ...] = (dlq, jobs, cancel, status, schedules, queues, admin,
                                       dashboard)
