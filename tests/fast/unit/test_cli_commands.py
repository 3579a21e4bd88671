"""``celery-plus``'s commands are imported when asked for (``celery_plus/cli/__init__.py``): a
worker's start imports neither the admin's commands nor Celery's CLI plugins (Flower's), and
every command is still there, by name and in the help."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from importlib import metadata

import click
import pytest

from celery_plus import cli


def test_the_names_on_demand_are_the_commands_their_modules_define() -> None:
    for names, modules in cli.COMMAND_MODULES.items():
        defined = {command.name for module in modules
                   for command in importlib.import_module(module).COMMANDS}
        assert defined == set(names), modules


def test_the_worker_command_imports_no_admin_command_and_no_plugin() -> None:
    code = ("import sys, json, celery_plus.cli as c; c._celery_group(); "
            "print(json.dumps(sorted(sys.modules)))")
    loaded = set(json.loads(subprocess.run([sys.executable, "-c", code], check=True,
                                           capture_output=True, text=True).stdout))
    assert "celery.bin.celery" in loaded  # (the check below means something)
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


def test_a_plugin_is_imported_when_asked_for_and_a_broken_one_says_so(
        monkeypatch: pytest.MonkeyPatch) -> None:
    group = cli._celery_group()
    ctx = click.Context(group)
    broken = metadata.EntryPoint("nowhere", "no_such_module_xyz:command", "celery.commands")
    monkeypatch.setattr(cli, "_plugins", lambda: {"nowhere": broken})
    monkeypatch.delitem(group.commands, "nowhere", raising=False)
    assert "nowhere" in group.list_commands(ctx)
    command = group.get_command(ctx, "nowhere")
    assert command is not None and "nowhere" in command.name  # type: ignore[operator]
    assert "could not be loaded" in (command.help or "") + (command.short_help or "")
    group.commands.pop("nowhere")


def test_the_console_script_still_runs_flower_s_command() -> None:
    pytest.importorskip("flower")
    done = subprocess.run([sys.executable, "-m", "celery_plus.cli", "flower", "--help"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "Web based tool for monitoring" in done.stdout
