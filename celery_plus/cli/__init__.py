"""The ``celery-plus`` command: Celery's CLI with celery-plus's commands added.

``celery-plus worker -A proj`` is ``celery -A proj worker`` (``-A``/``--app`` may come after
the sub-command, as in Celery 4). The same commands are available inside Celery's CLI as
``celery plus ...`` through the ``celery.commands`` entry point.
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Sequence
from importlib import metadata
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


#: The modules that define celery-plus's other commands, and the commands' names: a module is
#: imported when one of its commands runs or a help lists them, so that ``celery-plus worker``
#: imports none of them (the admin's bring the dashboard and prometheus_client: 40-50 ms of CPU
#: per process start). ``tests/fast/unit/test_cli_commands.py`` holds these names to the
#: modules' ``COMMANDS``.
COMMAND_MODULES: dict[tuple[str, ...], tuple[str, ...]] = {
    ("db",): ("celery_plus.cli.db",),
    ("migrate-queue",): ("celery_plus.cli.migrate_queue",),
    ("dlq", "jobs", "cancel", "store-status", "schedules", "queues", "admin", "dashboard",
     "tasks", "bulk", "workers", "limits"): (
        "celery_plus.cli.admin", "celery_plus.cli.admin_ops", "celery_plus.cli.admin_state"),
}
_MODULES_OF = {name: modules for names, modules in COMMAND_MODULES.items() for name in names}


def _load_commands(group: click.Group, name: str) -> None:
    """Add the commands of the modules that define ``name`` to ``group`` (once)."""
    for module in _MODULES_OF[name]:
        for command in importlib.import_module(module).COMMANDS:
            group.commands.setdefault(command.name or "", command)


class PlusGroup(click.Group):
    """A click group that finds celery-plus's commands when asked for them (``celery plus``;
    Celery's own group gets this side, and its plugins', from :func:`_celery_group`)."""

    #: Whether the ``celery.commands`` plugins are found here too (Celery's group).
    plugins = False

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands:
            if cmd_name in _MODULES_OF:
                _load_commands(self, cmd_name)
            else:
                self._load_plugins()
        return super().get_command(ctx, cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        self._load_plugins()
        return sorted({*super().list_commands(ctx), *_MODULES_OF})

    def _load_plugins(self) -> None:
        """Every plugin's command, under the command's own name, as Celery adds them (a
        command of Celery's own keeps its name): only once a name is asked for that no
        command of Celery or celery-plus has, or a list of them all."""
        if not self.plugins or getattr(self, "_plugins_loaded", False):
            return
        self._plugins_loaded = True
        for entry in metadata.entry_points(group="celery.commands"):
            command = _load_plugin(entry)
            self.commands.setdefault(command.name or entry.name, command)


def _load_plugin(entry: metadata.EntryPoint) -> click.Command:
    """A plugin's command, or, as Celery does, one that says it could not be loaded."""
    from click_plugins.core import BrokenCommand

    try:
        command = entry.load()
        if not isinstance(command, click.Command):
            raise TypeError(f"{entry.value} is not a click command")
    except Exception:  # (Celery's CLI catches everything a plugin raises so too)
        return BrokenCommand(entry.name)
    return command


@click.group(name="plus", cls=PlusGroup, help="celery-plus commands.")
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


def _import_celery_group() -> Any:
    """``celery.bin.celery.celery``, imported without its plugins: Celery imports every
    ``celery.commands`` entry point as its CLI module loads (Flower's brings Tornado and its
    web app: 80-90 ms of CPU before a worker starts); :class:`PlusGroup` imports the one asked
    for instead. (Celery 5.7, the declared range, reads them through ``importlib.metadata``'s
    ``entry_points(group=...)`` as the module loads; ``test_cli_commands.py`` checks it.)"""
    if "celery.bin.celery" in sys.modules:
        from celery.bin.celery import celery

        return celery
    every = metadata.entry_points

    def without_plugins(**params: Any) -> Any:
        return () if params.get("group") == "celery.commands" else every(**params)

    metadata.entry_points = without_plugins
    try:
        from celery.bin import celery as module
    finally:
        metadata.entry_points = every
    if getattr(module, "entry_points", None) is without_plugins:
        module.entry_points = every  # (its own name for the function, bound as it loaded)
    return module.celery


def _celery_group() -> Any:
    """Celery's own ``celery`` group with celery-plus's commands (``info``, ``demo`` and,
    on demand, the others)."""
    celery = _import_celery_group()
    if not isinstance(celery, PlusGroup):
        celery.__class__ = type("PlusCeleryGroup", (PlusGroup, type(celery)), {"plugins": True})
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

