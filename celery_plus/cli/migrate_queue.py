"""``celery-plus migrate-queue NAME``: the CLI of ``migrate.py`` (``amqp.py`` for a RabbitMQ
source, ``back.py`` for ``--back``).

The app (``-A proj``) gives the durable store (its ``plus+`` broker and ``plus_*``
settings) and the legacy layout (``plus_legacy_url``, else the ``plus+redis://`` server;
``broker_transport_options`` such as ``global_keyprefix``, ``priority_steps``,
``visibility_timeout``); options override them.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable
from typing import Any, TypeVar

import click
import kombu
import redis
from celery.bin.base import CeleryCommand
from kombu.utils.url import maybe_sanitize_url

from celery_plus.queue_migration.amqp import AmqpSource, migrate_amqp
from celery_plus.queue_migration.back import BackOptions, BackTally, move_back
from celery_plus.queue_migration.layout import KombuLayout
from celery_plus.queue_migration.migrate import (
    MigrateOptions,
    MigrationError,
    Source,
    Tally,
    migrate,
)
from celery_plus.queue_migration.parts import Lock
from celery_plus.stores.registry import admin_for, open_store
from celery_plus.transport import is_transient


def _app_setup(ctx: click.Context, queue: str, legacy_url: str | None,
               global_keyprefix: str | None, back: bool = False,
               ) -> tuple[Any, str, str, KombuLayout]:
    """(plus config, durable store URL, legacy Redis URL, kombu layout) of the app."""
    app = getattr(ctx.obj, "app", None)
    if app is None or not hasattr(app, "plus_config"):
        raise click.UsageError("migrate-queue needs a celery_plus.Celery app: pass -A proj")
    try:
        config = app.plus_config()
    except Exception as exc:
        raise click.UsageError(str(exc)) from exc
    broker = app.conf.broker_url
    if isinstance(broker, (list, tuple)):
        broker = broker[0] if broker else ""
    broker = str(broker or "")
    if not broker.startswith("plus+"):
        raise click.UsageError(
            f"broker_url {maybe_sanitize_url(broker)!r} is not a celery-plus durable store: "
            "set a plus+redis://, plus+postgresql:// or plus+sqlite:/// broker_url")
    if is_transient(queue):
        raise click.UsageError(f"{queue!r} is a remote-control or event queue, not a task "
                               "queue: nothing to migrate")
    if not back and config.durable_queues is not None and queue not in config.durable_queues:
        raise click.UsageError(
            f"queue {queue!r} is not in plus_durable_queues "
            f"{sorted(config.durable_queues)!r}: celery-plus would not consume the jobs "
            f"moved there. Add {queue!r} to plus_durable_queues (and deploy it, so new "
            "messages are stored durably) before moving what is left in the legacy queue.")
    inner = broker.removeprefix("plus+")
    url = legacy_url or config.legacy_url or inner
    scheme = url.partition("://")[0]
    if scheme in AMQP_SCHEMES and back:
        raise click.UsageError("--back moves jobs onto plain Celery's Redis broker: pass "
                               "--legacy-url redis://host:6379/0, not an amqp:// URL")
    if scheme not in ("redis", "rediss", *AMQP_SCHEMES):
        raise click.UsageError(
            f"the legacy queues are in Redis or RabbitMQ, and broker "
            f"{maybe_sanitize_url(broker)} is neither: pass --legacy-url redis://host:6379/0 "
            "or amqp://user:password@host:5672/vhost (or set plus_legacy_url)")
    layout = KombuLayout.from_options(app.conf.broker_transport_options, global_keyprefix)
    return config, inner, url, layout


#: --legacy-url schemes of a RabbitMQ source (``queue_migration/amqp.py``).
AMQP_SCHEMES = ("amqp", "amqps", "pyamqp")

T = TypeVar("T")


def _progress(line: Callable[[T], str]) -> Callable[[str, T], None]:
    """A migration's progress callback: its tally as ``line`` says, at most twice a second,
    and when it is done."""
    last = [0.0]

    def progress(stage: str, tally: T) -> None:
        now = time.monotonic()
        if stage == "done" or now - last[0] >= 0.5:
            last[0] = now
            click.echo(line(tally))

    return progress


def _line(queue: str, tally: Tally) -> str:
    if not tally.planned and not tally.done:
        return f"{queue}: nothing to move"
    line = (f"{queue}: {tally.done}/{tally.planned} moved "
            f"(new jobs {tally.moved}, already in the store {tally.present}, "
            f"coalesced {tally.coalesced}, dead-lettered {tally.malformed}")
    if tally.from_unacked:
        line += f"; {tally.from_unacked} from unacked"
    return line + ")"


@click.command(cls=CeleryCommand, name="migrate-queue")
@click.argument("name")
@click.option("--back", is_flag=True,
              help="The other way: move the queue's waiting jobs (enqueued, scheduled, "
                   "blocked) from the durable store back onto plain Celery's Redis broker, "
                   "through kombu's producer (see docs/migration.md).")
@click.option("--dry-run", is_flag=True, help="Count what would move; change nothing.")
@click.option("--include-unacked", is_flag=True,
              help="Also move the queue's entries of kombu's unacked hash delivered longer "
                   "ago than --unacked-older-than (only safe when no legacy worker still "
                   "runs them: see docs/migration.md).")
@click.option("--unacked-older-than", type=click.FloatRange(min=0), default=None,
              help="Seconds (default: the visibility_timeout of broker_transport_options, "
                   "3600). 0 once every legacy worker is stopped.")
@click.option("--batch-size", type=click.IntRange(min=1, max=10_000), default=500,
              show_default=True, help="Messages per atomic step.")
@click.option("--rate", type=click.FloatRange(min=0, min_open=True), default=None,
              help="At most this many messages per second (default: no limit).")
@click.option("--legacy-url", default=None,
              help="Redis URL of the legacy queues (default: plus_legacy_url, else the "
                   "plus+redis:// server), or the amqp:// URL of a RabbitMQ broker to "
                   "move queue NAME from.")
@click.option("--global-keyprefix", default=None,
              help="kombu's global_keyprefix (default: the one in broker_transport_options).")
@click.pass_context
def migrate_queue(ctx: click.Context, name: str, back: bool, dry_run: bool,
                  include_unacked: bool, unacked_older_than: float | None, batch_size: int,
                  rate: float | None, legacy_url: str | None,
                  global_keyprefix: str | None) -> None:
    """Move the pending messages of legacy kombu Redis queue NAME (or, with --legacy-url
    amqp://…, RabbitMQ queue NAME) into the durable store.

    No loss, no duplicates (by task id); safe to interrupt and re-run. With --back, move
    the waiting jobs of durable queue NAME back to plain Celery's broker: no loss; a crash
    may duplicate at most one batch; safe to re-run.
    """
    if back:
        if include_unacked or unacked_older_than is not None:
            raise click.UsageError("--include-unacked and --unacked-older-than move kombu's "
                                   "unacked entries into the store; not with --back")
        _migrate_back(ctx, name, dry_run, batch_size, rate, legacy_url, global_keyprefix)
        return
    config, store_url, url, layout = _app_setup(ctx, name, legacy_url, global_keyprefix)
    options = MigrateOptions(queue=name, batch_size=batch_size,
                             include_unacked=include_unacked,
                             unacked_older_than=unacked_older_than, rate=rate,
                             dry_run=dry_run)
    if url.partition("://")[0] in AMQP_SCHEMES:
        if include_unacked or unacked_older_than is not None:
            raise click.UsageError("--include-unacked and --unacked-older-than read kombu's "
                                   "Redis unacked hash; RabbitMQ gives back what a stopped "
                                   "consumer held by itself (see docs/migration.md)")
        _migrate_amqp(name, options, store_url, config, url)
        return
    backend = open_store(store_url, config)
    client = redis.Redis.from_url(url)
    source = Source(client, layout, name, max_deliveries=config.max_deliveries)
    progress = _progress(functools.partial(_line, name))

    with contextlib.closing(backend), contextlib.closing(client):
        try:
            tally = migrate(source, backend, options, progress)
        except MigrationError as exc:
            raise click.ClickException(str(exc)) from exc
    if dry_run:
        click.echo(f"{name}: dry run, nothing changed. {tally.planned} legacy messages: "
                   f"{tally.moved} would become jobs, {tally.present} are already in the "
                   f"store, {tally.malformed} would be dead-lettered"
                   + (f"; {tally.from_unacked} of them from unacked" if include_unacked
                      else ""))
    if tally.unacked_left:
        click.echo(f"{name}: {tally.unacked_left} unacked entries of the queue stay in kombu's "
                   "unacked hash (held by legacy workers, or newer than "
                   "--unacked-older-than); see docs/migration.md")


def _migrate_amqp(name: str, options: MigrateOptions, store_url: str, config: Any,
                  url: str) -> None:
    """``migrate-queue NAME --legacy-url amqp://…`` (``queue_migration/amqp.py``)."""
    backend = open_store(store_url, config)
    with contextlib.closing(backend), kombu.Connection(url) as connection:
        source = AmqpSource(connection, name, max_deliveries=config.max_deliveries)
        try:
            tally = migrate_amqp(source, backend, options,
                                 _progress(functools.partial(_line, name)))
            consumers = source.counts()[1]
        except MigrationError as exc:
            raise click.ClickException(str(exc)) from exc
    if options.dry_run:
        click.echo(f"{name}: dry run, nothing changed. {tally.planned} messages ready in "
                   "RabbitMQ (which of them the store has already is known only by moving)")
    if consumers:
        click.echo(f"{name}: {consumers} consumers still attached in RabbitMQ: the messages "
                   "they hold unacked come back to the queue when they stop; run again then "
                   "(see docs/migration.md)")


def _back_line(queue: str, tally: BackTally) -> str:
    if not tally.planned and not tally.done:
        return f"{queue}: nothing to move back"
    line = (f"{queue}: {tally.done}/{tally.planned} moved back "
            f"(messages {tally.moved}, of them scheduled {tally.scheduled}")
    if tally.raced:
        line += f"; claimed by a celery-plus worker meanwhile, so published twice {tally.raced}"
    if tally.unreadable:
        line += f"; not a kombu envelope, left in the store {tally.unreadable}"
    return line + ")"


def _migrate_back(ctx: click.Context, name: str, dry_run: bool, batch_size: int,
                  rate: float | None, legacy_url: str | None,
                  global_keyprefix: str | None) -> None:
    """``migrate-queue NAME --back`` (``queue_migration/back.py``)."""
    config, store_url, url, layout = _app_setup(ctx, name, legacy_url, global_keyprefix,
                                                back=True)
    app = ctx.obj.app
    options = BackOptions(queue=name, batch_size=batch_size, rate=rate, dry_run=dry_run)
    transport_options = {**(app.conf.broker_transport_options or {}),
                         "global_keyprefix": layout.global_keyprefix}
    backend = open_store(store_url, config)
    admin = admin_for(backend)
    client = redis.Redis.from_url(url)
    plain = kombu.Connection(url, transport_options=transport_options)
    progress = _progress(functools.partial(_back_line, name))

    if config.durable_queues is None or name in config.durable_queues:
        click.echo(f"{name}: note: this app still stores {name!r} durably "
                   "(plus_durable_queues); publishers with this configuration keep adding "
                   "jobs to the store", err=True)
    with contextlib.closing(backend), contextlib.closing(client), plain:
        try:
            tally = move_back(backend, admin, plain.Producer(), Lock(client, layout.lock(name)),
                              options, progress)
        except MigrationError as exc:
            raise click.ClickException(str(exc)) from exc
    if dry_run:
        click.echo(f"{name}: dry run, nothing changed. {tally.planned} waiting jobs would "
                   "move back")
    if tally.running or tally.dead:
        click.echo(f"{name}: left in the store: {tally.running} running (they finish on "
                   f"their celery-plus workers), {tally.dead} dead letters "
                   "(celery-plus dlq); see docs/migration.md")


COMMANDS: tuple[click.Command, ...] = (migrate_queue,)
