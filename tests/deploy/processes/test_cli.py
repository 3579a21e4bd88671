"""The celery-plus command line: global options after the sub-command, and the plugin entry."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest

from celery_plus.cli import hoist_global_options

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["worker", "-A", "proj", "-l", "INFO"], ["-A", "proj", "worker", "-l", "INFO"]),
        (["worker", "--app=proj", "-c", "2"], ["--app=proj", "worker", "-c", "2"]),
        (["-A", "proj", "worker"], ["-A", "proj", "worker"]),
        (["inspect", "ping", "--app", "proj"], ["--app", "proj", "inspect", "ping"]),
        (["worker", "--", "-A", "x"], ["worker", "--", "-A", "x"]),
        ([], []),
    ],
)
def test_global_options_move_before_the_subcommand(argv: list[str], expected: list[str]) -> None:
    assert hoist_global_options(argv) == expected


@pytest.mark.parametrize(
    "command",
    [
        [sys.executable, "-m", "celery_plus.cli", "info", "-A", "tests.deploy.e2e.proj"],
        [sys.executable, "-m", "celery", "-A", "tests.deploy.e2e.proj", "plus", "info"],
    ],
    ids=["celery-plus info", "celery plus info"],
)
def test_info_reports_the_durable_settings(command: list[str]) -> None:
    env = {**os.environ, "PLUS_TEST_PREFIX": "cli-test", "PLUS_TEST_VT": "7"}
    out = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=60, check=True)
    report = json.loads(out.stdout)
    assert report["broker_url"].startswith("plus+redis://")
    assert report["visibility_timeout"] == 7.0
    assert report["key_prefix"] == "cli-test"


def test_celery_plus_status_is_celerys_and_exits_69_when_no_worker_replies() -> None:
    """``celery-plus status`` keeps Celery's meaning: the workers that answer a ping, exit 69
    ("No nodes replied") when none does; the store's table is ``store-status``."""
    env = {**os.environ, "PLUS_TEST_PREFIX": f"cli-status-{os.getpid()}"}
    done = subprocess.run(
        [sys.executable, "-m", "celery_plus.cli", "status", "-A", "tests.deploy.e2e.proj",
         "--timeout", "0.5"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 69, (done.stdout, done.stderr)
    assert "No nodes replied" in done.stdout + done.stderr


def test_the_store_table_is_store_status_and_celerys_status_is_kept() -> None:
    from celery.bin.control import status as celery_status

    from celery_plus.cli import _celery_group, plus
    from celery_plus.cli.admin import status as store_status

    group = _celery_group()
    ctx, plus_ctx = click.Context(group), click.Context(plus)
    assert group.get_command(ctx, "status") is celery_status
    assert group.get_command(ctx, "store-status") is store_status
    assert "status" not in plus.list_commands(plus_ctx)
    assert plus.get_command(plus_ctx, "store-status") is store_status
