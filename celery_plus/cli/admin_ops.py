"""The operator's bulk commands of the admin CLI: dead letters grouped by error and what acts
on a whole group (``dlq groups``, ``dlq retry-group``, ``dlq discard-group``), and the
per-task breakdown (``tasks``), and an action on every job a listing's filters match
(``bulk``).

Registered beside ``cli/admin.py``'s commands (the ``dlq`` group is that module's); they use the
Python API only (``admin/grouped_errors.py``).
"""

from __future__ import annotations

from typing import Any

import click
from celery.bin.base import CeleryCommand

from celery_plus.admin.filter_actions import ACTION_STATES
from celery_plus.admin.task_stats import WINDOWS, TaskBreakdown
from celery_plus.admin.text import visible, when
from celery_plus.cli.admin import (
    Duration,
    Moment,
    _admin,
    _bulk_text,
    _echo,
    _emit_json,
    _interruptible,
    clip,
    dlq,
    table,
)
from celery_plus.model.admin import BulkResult
from celery_plus.model.capped import count_text
from celery_plus.model.error_groups import MAX_GROUPS, ErrorGroups


def groups_text(found: ErrorGroups) -> str:
    if not found.groups and not found.unindexed:
        return "no dead letters"
    rows = [(count_text(g.count), visible(clip(g.exc_type, 40)), visible(clip(g.message, 80)),
             when(g.newest_ms), when(g.oldest_ms)) for g in found.groups]
    text = table(["DEAD", "TYPE", "MESSAGE", "NEWEST", "OLDEST"], rows)
    shown = len(found.groups)
    more = f" (the {shown} largest shown)" if shown < found.total else ""
    if found.sampled:
        more += (f"; found among the newest {found.sampled - 1} dead letters, counts over "
                 "10000 shown 10000+")
    if found.unindexed:
        more += (f"; {found.unindexed} newer dead letters not counted yet (the group index "
                 "is built a part per read: run it again)")
    return f"{text}\n{found.total} group{'s' * (found.total != 1)}{more}"


@dlq.command(cls=CeleryCommand, name="groups")
@click.option("--limit", type=click.IntRange(1, MAX_GROUPS), default=100, show_default=True,
              help="Show at most this many groups, the largest first.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def dlq_groups(ctx: click.Context, limit: int, as_json: bool) -> None:
    """Dead letters grouped by exception type and message (its first line, 200 characters):
    how many, the newest and the oldest."""
    with _admin(ctx) as admin:
        found = admin.error_groups(limit)
    if as_json:
        _emit_json(found.to_dict())
    else:
        _echo(groups_text(found))


def _group_action(ctx: click.Context, action: str, exc_type: str, message: str, yes: bool,
                  as_json: bool) -> None:
    with _admin(ctx) as admin:
        if not yes:
            click.confirm(f"{action.capitalize()} every dead letter of "
                          f"{visible(exc_type)}: {visible(message)}?", abort=True, err=True)
        result = BulkResult(action)
        with _interruptible(ctx, result, "dead letters", as_json):
            run: Any = admin.retry_group if action == "retry" else admin.discard_group
            run(exc_type, message, result=result)
    if as_json:
        _emit_json(result.to_dict())
    else:
        _echo(_bulk_text(result, "dead letters"))
    if result.conflicts:
        ctx.exit(1)


_GROUP_OPTIONS = (
    click.option("--type", "exc_type", required=True,
                 help="The group's exception type, as `dlq groups` shows it."),
    click.option("--message", required=True,
                 help="The group's message, as `dlq groups` shows it ('' for none)."),
    click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation."),
    click.option("--json", "as_json", is_flag=True, help="Print JSON."),
)


def _group_options(func: Any) -> Any:
    for option in reversed(_GROUP_OPTIONS):
        func = option(func)
    return func


@dlq.command(cls=CeleryCommand, name="retry-group")
@_group_options
@click.pass_context
def dlq_retry_group(ctx: click.Context, exc_type: str, message: str, yes: bool,
                    as_json: bool) -> None:
    """Retry every dead letter of one error group (oldest first, in batches)."""
    _group_action(ctx, "retry", exc_type, message, yes, as_json)


@dlq.command(cls=CeleryCommand, name="discard-group")
@_group_options
@click.pass_context
def dlq_discard_group(ctx: click.Context, exc_type: str, message: str, yes: bool,
                      as_json: bool) -> None:
    """Discard every dead letter of one error group (oldest first, in batches)."""
    _group_action(ctx, "discard", exc_type, message, yes, as_json)


def _ms(value: int | None) -> str:
    return "-" if value is None else f"{value / 1000:.3f}s"


def tasks_text(found: TaskBreakdown, window: str) -> str:
    if not found.tasks:
        return f"no jobs waiting, running or finished in the last {window}"
    rows = [(visible(clip(t.name, 60)), t.waiting, t.running, t.succeeded, t.failed,
             count_text(t.dead), "-" if t.failure_rate is None else f"{t.failure_rate:.1%}",
             _ms(t.p50_ms), _ms(t.p95_ms)) for t in found.tasks]
    text = table(["TASK", "WAITING", "RUNNING", "SUCCEEDED", "FAILED", "DEAD", "FAIL RATE",
                  "P50", "P95"], rows)
    text += (f"\nsucceeded, failed, rates and runtimes: finished in the last {window} (the "
             f"newest {found.sample} of each); waiting, running: the newest {found.sample} "
             "of each state; dead: dead letters now")
    if found.sampled:
        text += f"\nsampled (more jobs than read): {', '.join(found.sampled)}"
    return text


@click.command(cls=CeleryCommand, name="tasks")
@click.option("--window", type=click.Choice(list(WINDOWS)), default="1h", show_default=True,
              help="The recent window of the finished jobs' figures.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def tasks(ctx: click.Context, window: str, as_json: bool) -> None:
    """Per task name: jobs waiting, running, succeeded, failed, dead; the failure rate and
    the runtime's p50 / p95 over a recent window (from bounded samples)."""
    with _admin(ctx) as admin:
        found = admin.task_breakdown(WINDOWS[window])
    if as_json:
        _emit_json(found.to_dict())
    else:
        _echo(tasks_text(found, window))


@click.command(cls=CeleryCommand, name="bulk")
@click.argument("action", type=click.Choice(list(ACTION_STATES)))
@click.argument("state", type=click.Choice(sorted({s for v in ACTION_STATES.values()
                                                    for s in v})))
@click.option("--task", help="Only jobs of this task name.")
@click.option("--queue", help="Only jobs of this queue.")
@click.option("--since", type=Moment(),
              help="Only jobs at or after this time (ISO 8601, UTC) or age (15m, 2h).")
@click.option("--until", type=Moment(), help="Only jobs at or before this time or age.")
@click.option("--text", help="Text in the arguments or the error (any case).")
@click.option("--deadline", "seconds", type=Duration(),
              help="Stop at the first batch after this long (90s, 15m), saying how many "
                   "jobs were acted on (the rest untouched); exit 1.")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@click.pass_context
def bulk(ctx: click.Context, action: str, state: str, task: str | None, queue: str | None,
         since: Any, until: Any, text: str | None, seconds: float | None, yes: bool,
         as_json: bool) -> None:
    """Retry, discard, cancel or purge EVERY job of STATE that matches the filters (those of
    `jobs STATE`), in batches of 500: asks first, showing how many match."""
    if state not in ACTION_STATES[action]:
        raise click.UsageError(f"{action} takes {', '.join(ACTION_STATES[action])} jobs, "
                               f"not {state}")
    filters = {"task": task, "queue": queue, "since": since, "until": until, "text": text}
    with _admin(ctx) as admin:
        if not yes:
            matched = admin.count_matching(state, **filters)
            words = ", ".join(f"{k} {visible(str(v))}" for k, v in filters.items() if v)
            click.confirm(f"{action.capitalize()} {count_text(matched)} {state} jobs "
                          f"({words or 'no filter: every one'})?", abort=True, err=True)
        result = BulkResult(action)
        with _interruptible(ctx, result, f"{state} jobs", as_json, seconds):
            admin.act_on_filter(action, state, **filters, result=result)
    if as_json:
        _emit_json(result.to_dict())
    else:
        _echo(_bulk_text(result, f"matching {state} jobs"))
    if result.conflicts:
        ctx.exit(1)


#: Top-level commands of this module (the ``dlq`` ones are added to cli/admin.py's group).
COMMANDS: tuple[click.Command, ...] = (tasks, bulk)
