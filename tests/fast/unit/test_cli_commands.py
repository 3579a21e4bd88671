"""``celery-plus``'s commands are imported when asked for (``celery_plus/cli/__init__.py``): a
worker's start imports neither the admin's commands nor Celery's CLI plugins (Flower's), and
every command is still there, by name and in the help."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from celery_plus import cli


def test_the_names_on_demand_are_the_commands_their_modules_define() -> None:
    for names, modules in cli.COMMAND_MODULES.items():
        defined = {command.name for module in modules
                   for command in importlib.import_module(module).COMMANDS}
        assert defined == set(names), modules


def test_the_worker_command_imports_no_admin_command_and_no_plugin() -> None:
    code = ("import sys, json, importlib.metadata as m, celery_plus.cli as c; "
            "c._celery_group(); print(json.dumps([sorted(sys.modules), "
            "sys.modules['celery.bin.celery'].entry_points is m.entry_points]))")
    modules, kept_entry_points = json.loads(subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout)
    loaded = set(modules)
    assert "celery.bin.celery" in loaded  # (the check below means something)
    # (and Celery's module keeps the real entry_points, though it took the stand-in as it loaded)
    assert kept_entry_points is True
    assert not {m for m in loaded if m.startswith(("celery_plus.admin", "celery_plus.cli."))}
    assert not {"flower", "prometheus_client", "tornado"} & loaded


def test_every_command_is_found_by_name_and_listed() -> None:
    group = cli._celery_group()
    ctx = click.Context(group)
    listed = group.list_commands(ctx)
    for name in (*cli._MODULES_OF, "worker", "status", "info", "demo", "plus"):
        assert name in listed
        command = group.get_command(ctx, name)
        assert command is not None and command.name == name
    assert group.get_command(ctx, "dlq").commands.keys() >= {"ls", "retry", "groups"}  # type: ignore[union-attr]
    plus_ctx = click.Context(cli.plus)
    assert cli.plus.get_command(plus_ctx, "migrate-queue") is not None
    assert "status" not in cli.plus.list_commands(plus_ctx)  # (Celery's own stays Celery's)


PLUGIN = """
import click

@click.command(name="hello-world")
def hello():
    click.echo("hello from a plugin")

class OldStyleDelegate:  # (a Celery 4 command class, no click command)
    pass
"""


@pytest.fixture
def plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> cli.PlusGroup:
    """A group like Celery's (plugins found on it) whose ``celery.commands`` are a plugin
    named otherwise than its command, one that is no click command, one that cannot load."""
    (tmp_path / "fakeplug_cli.py").write_text(PLUGIN)
    monkeypatch.syspath_prepend(str(tmp_path))
    entries = [metadata.EntryPoint("hello", "fakeplug_cli:hello", "celery.commands"),
               metadata.EntryPoint("oldstyle", "fakeplug_cli:OldStyleDelegate", "celery.commands"),
               metadata.EntryPoint("nowhere", "no_such_module_xyz:command", "celery.commands")]
    every = metadata.entry_points
    monkeypatch.setattr(metadata, "entry_points", lambda **params: (
        entries if params.get("group") == "celery.commands" else every(**params)))
    group = cli.PlusGroup(name="celery")
    group.plugins = True
    group.add_command(click.Command("own", callback=lambda: None))
    return group


def test_a_command_of_its_own_loads_no_plugin(plugins: cli.PlusGroup) -> None:
    assert plugins.get_command(click.Context(plugins), "own") is not None
    assert "hello-world" not in plugins.commands


def test_plugins_are_found_under_their_commands_names_and_broken_ones_say_so(
        plugins: cli.PlusGroup) -> None:
    ctx = click.Context(plugins)
    listed = plugins.list_commands(ctx)
    assert {"own", "hello-world", "oldstyle", "nowhere"} <= set(listed)
    assert "hello" not in listed  # (the entry point's name; Celery lists the command's)
    done = CliRunner().invoke(plugins, ["hello-world"])
    assert done.exit_code == 0 and done.output == "hello from a plugin\n", done.output
    for broken in ("oldstyle", "nowhere"):
        command = plugins.get_command(ctx, broken)
        assert command is not None
        assert "could not be loaded" in (command.help or "") + (command.short_help or "")
    assert CliRunner().invoke(plugins, ["--help"]).exit_code == 0


def test_the_console_script_still_runs_flower_s_command() -> None:
    pytest.importorskip("flower")
    done = subprocess.run([sys.executable, "-m", "celery_plus.cli", "flower", "--help"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "Web based tool for monitoring" in done.stdout
