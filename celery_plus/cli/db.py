"""``celery-plus db migrate`` / ``celery-plus db status``: the PostgreSQL store's schema.

The store (``plus+postgresql://``) is migrated automatically on first use; these commands do
it ahead of a deploy, or show which versions are applied and which function files
(``stores/postgres/functions``) are pending. The target is the app's broker
(``-A proj``) and its ``plus_pg_schema`` setting, or ``--url`` / ``--schema``.
"""

from __future__ import annotations

import contextlib
from typing import Any

import click
from celery.bin.base import CeleryCommand
from kombu.utils.url import maybe_sanitize_url

from celery_plus.stores.postgres import migrations as pg_migrations


def _target(ctx: click.Context, url: str | None, schema: str | None) -> tuple[str, str]:
    """(libpq URL, schema) from the options, else from the app's configuration."""
    app = getattr(ctx.obj, "app", None)
    if url is None:
        broker = app.conf.broker_url if app is not None else None
        if isinstance(broker, (list, tuple)):
            broker = broker[0] if broker else None
        if not broker:
            raise click.UsageError("no broker: pass -A proj (a plus+postgresql:// broker) "
                                   "or --url postgresql://user@host/db")
        url = str(broker)
    inner = url.removeprefix("plus+")
    if inner.partition("://")[0] not in ("postgresql", "postgres"):
        raise click.UsageError(
            f"{maybe_sanitize_url(url)} is not a PostgreSQL store; the db commands manage "
            "plus+postgresql:// brokers (pass -A proj or --url postgresql://...)")
    if schema is None:
        schema = "celery_plus"
        if app is not None and hasattr(app, "plus_config"):
            schema = app.plus_config().pg_schema
    try:
        pg_migrations.check_schema(schema)
    except Exception as exc:
        raise click.UsageError(str(exc)) from exc
    return inner, schema


_url_option = click.option("--url", default=None,
                            help="postgresql://user@host/db (default: the app's broker).")
_schema_option = click.option("--schema", default=None,
                              help="Schema of the store (default: plus_pg_schema).")


@click.group(name="db", help="The PostgreSQL store's schema: migrate, status.")
def db() -> None:
    pass


@db.command(cls=CeleryCommand, name="migrate")
@_url_option
@_schema_option
@click.pass_context
def migrate(ctx: click.Context, url: str | None, schema: str | None) -> None:
    """Apply the store's pending migrations and changed function files (safe while workers
    run or start)."""
    target, name = _target(ctx, url, schema)
    with contextlib.closing(pg_migrations.connect(target)) as conn:
        applied = pg_migrations.migrate(conn, name)
    if not applied.migrations and not applied.functions:
        click.echo(f"schema {name}: up to date")
    for migration in applied.migrations:
        click.echo(f"schema {name}: applied {migration.version:04d}_{migration.name}")
    for file in applied.functions:
        click.echo(f"schema {name}: applied functions/{file.name}.sql")


@db.command(cls=CeleryCommand, name="status")
@_url_option
@_schema_option
@click.pass_context
def status(ctx: click.Context, url: str | None, schema: str | None) -> None:
    """List the store's migrations (applied, with when, or pending) and its function files
    not current (pending, changed, or unknown to this version). Exit 1 if any pending."""
    target, name = _target(ctx, url, schema)
    with contextlib.closing(pg_migrations.connect(target)) as conn:
        rows = pg_migrations.status(conn, name)
        functions = pg_migrations.function_status(conn, name)
    click.echo(f"schema {name}")
    pending: list[Any] = []
    for row in rows:
        when = ("pending" if row.applied_at is None
                else f"applied {row.applied_at:%Y-%m-%d %H:%M:%S%z}")
        click.echo(f"  {row.version:04d}_{row.name}  {when}")
        if row.applied_at is None:
            pending.append(row)
    pending += _echo_functions(functions)
    if pending:
        ctx.exit(1)


def _echo_functions(rows: list[pg_migrations.FunctionStatus]) -> list[Any]:
    """Print the function files' summary and each one not current; returns those to apply."""
    to_apply = [row for row in rows if row.state in ("pending", "changed")]
    if rows and all(row.state == "pending" for row in rows):  # a new store: one line
        click.echo(f"  functions/*.sql  pending ({len(rows)} files)")
        return to_apply
    current = sum(row.state == "current" for row in rows)
    click.echo(f"  functions: {current} of {sum(row.state != 'unknown' for row in rows)} "
               "files current")
    for row in rows:
        if row.state != "current":
            click.echo(f"  functions/{row.name}.sql  {row.state}")
    return to_apply


COMMANDS: tuple[click.Command, ...] = (db,)
