"""The ``celery-plus`` command: Celery's CLI with celery-plus's commands added.

``celery-plus worker -A proj`` is ``celery -A proj worker`` (``-A``/``--app`` may come after
the sub-command, as in Celery 4). The same commands are available inside Celery's CLI as
``celery plus ...`` through the ``celery.commands`` entry point.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

import click
from celery.bin.base import CeleryCommand

GLOBAL_OPTIONS_WITH_VALUE = ("-A", "--app", "-b", "--broker", "--result-backend", "--workdir",
                             "--config")


def hoist_global_options(argv: Sequence[str]) -> list[str]:
    """Move ``-A proj`` (and other global options) given after the sub-command to the front."""
    args = list(argv)
    if not args or args[0].startswith("-"):
        return args
    hoisted: list[str] = []
    rest: list[str] = [args[0]]
    i = 1
    while i < len(args):
        arg = args[i]
        name = arg.split("=", 1)[0]
        if arg == "--":
            rest += args[i:]
            break
        if name in GLOBAL_OPTIONS_WITH_VALUE:
            if "=" in arg:
                hoisted.append(arg)
            elif i + 1 < len(args):
                hoisted += [arg, args[i + 1]]
                i += 1
            i += 1
            continue
        rest.append(arg)
        i += 1
    return hoisted + rest


@click.group(name="plus", help="celery-plus commands.")
def plus() -> None:
    pass


@plus.command(cls=CeleryCommand, name="info")
@click.pass_context
def info(ctx: click.Context) -> None:
    """Show the durable transport settings of the app."""
    app = ctx.obj.app
    get_config = getattr(app, "plus_config", None)
    if get_config is None:
        raise click.UsageError("this app is not a celery_plus.Celery app")
    config = get_config()
    click.echo(json.dumps({"broker_url": app.connection_for_read().as_uri(),
                           **config.__dict__}, indent=2, default=sorted))


@plus.command(name="demo")
def demo() -> None:
    """Run two workers on a temporary embedded store and show each extension at work."""
    from celery_plus.demo.runner import run_demo

    code = run_demo()
    if code:
        sys.exit(code)


def _add_db_commands() -> None:
    from celery_plus.cli.db import db

    plus.add_command(db)


_add_db_commands()


def _add_migrate_command() -> None:
    """``migrate-queue``: move a legacy kombu Redis queue into the durable store."""
    from celery_plus.cli.migrate_queue import migrate_queue

    plus.add_command(migrate_queue)


_add_migrate_command()


def _add_admin_commands() -> None:
    """``dlq``, ``jobs``, ``cancel``, ``store-status``, ``admin`` (alias ``dashboard``): the admin
    (cli/admin.py)."""
    from celery_plus.cli.admin import COMMANDS
    from celery_plus.cli.admin_ops import COMMANDS as OPERATOR_COMMANDS
    from celery_plus.cli.admin_state import COMMANDS as STATE_COMMANDS

    for command in (*COMMANDS, *OPERATOR_COMMANDS, *STATE_COMMANDS):
        plus.add_command(command)


_add_admin_commands()


def _celery_group() -> Any:
    from celery.bin.celery import celery

    for name, command in plus.commands.items():
        celery.add_command(command, name)
    return celery


def _install_flower_broker() -> None:
    """Flower's broker page and queue lengths on a plus store (contrib/flower.py)."""
    try:
        from celery_plus.contrib.flower import install
    except ImportError:  # Flower is not installed: Celery's CLI says so itself
        return
    install()


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``celery-plus`` console script."""
    import celery_plus  # noqa: F401  (registers the transport before any app loads)

    args = hoist_global_options(sys.argv[1:] if argv is None else argv)
    if "flower" in args:
        _install_flower_broker()
    group = _celery_group()
    group.main(args=args, prog_name="celery-plus", auto_envvar_prefix="CELERY")

