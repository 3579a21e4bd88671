"""The admin CLI through click's runner (issue 5: "CLI tests through click's runner ..., human
and --json output"; "readable tables for people, --json for scripts, exit codes that mean
something, confirmation on bulk destructive actions (--yes to skip)").

Each test runs on a SQLite store in its tmp_path and on a Redis key prefix (``kind``), with an
app whose broker is that store; dead letters are made through the store backend (publish,
claim, settle with ``fail``). Exit codes: 0 ok / no-op, 1 not found, conflict or declined,
2 usage.
"""

from __future__ import annotations

import base64
import contextlib
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click
import pytest
import redis
from celery.bin.base import CLIContext
from click.testing import CliRunner, Result

from celery_plus import Celery
from celery_plus.admin import connect
from celery_plus.cli import plus
from celery_plus.cli.admin import parse_duration, parse_moment, table
from celery_plus.model.store import Backend, NewJob, Settle
from tests.inspectors import inspector_for
from tests.support import drop_pg_schema

REDIS_URL = "redis://127.0.0.1:6379/0"


def new_job(job_id: str, task: str = "proj.mail", queue: str = "celery",
            args: list[Any] | None = None, **fields: Any) -> NewJob:
    """A job of a real Celery message (protocol 2, JSON) for ``Store`` to publish."""
    body = json.dumps([args or [], {}, {}]).encode()
    msg = json.dumps({
        "body": base64.b64encode(body).decode(), "content-type": "application/json",
        "content-encoding": "utf-8",
        "headers": {"task": task, "id": job_id, "argsrepr": repr(tuple(args or ())),
                    "kwargsrepr": "{}"},
        "properties": {"body_encoding": "base64", "correlation_id": job_id}})
    return NewJob(id=job_id, queue=queue, message=msg, name=task, **fields)


class Store:
    """The test's app and a backend on its store."""

    def __init__(self, app: Celery, backend: Backend) -> None:
        self.app = app
        self.backend = backend

    def job(self, job_id: str, task: str = "proj.mail", queue: str = "celery",
            args: list[Any] | None = None, **fields: Any) -> None:
        assert self.backend.publish(new_job(job_id, task, queue, args, **fields)).accepted

    def dead(self, job_id: str, task: str = "proj.mail", queue: str = "celery",
             error: str = "SMTP down", **fields: Any) -> None:
        self.job(job_id, task, queue, **fields)
        [got] = self.backend.claim([queue], "w1", 1).claims
        assert got.job_id == job_id
        self.backend.settle([Settle(job_id, got.token, "fail", {
            "reason": "task failed", "exc_type": "ConnectionError", "exc_message": error,
            "traceback": "Traceback (most recent call last):\nConnectionError: " + error})])

    def state(self, job_id: str) -> str | None:
        return (inspector_for(self.backend).job(job_id) or {}).get("st")


@contextlib.contextmanager
def admin_store(kind: str, tmp_path: Path) -> Iterator[Store]:
    """An app on a store of ``kind`` (``sqlite`` or ``redis``) with its admin's backend."""
    prefix = f"a{uuid.uuid4().hex[:10]}"
    broker = (f"plus+sqlite:///{tmp_path / 'store.db'}" if kind == "sqlite"
              else f"plus+{REDIS_URL}")
    app = Celery("admin-cli", broker=broker, set_as_current=False)
    app.conf.plus_key_prefix = prefix
    admin = connect(app)
    backend: Backend = admin.store.backend  # type: ignore[attr-defined]
    yield Store(app, backend)
    admin.close()
    app.close()
    drop_store(kind, prefix)


#: Here the in-process store only; ``tests/stores/unit`` runs this module on Redis.
@pytest.fixture(params=["sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    with admin_store(request.param, tmp_path) as made:
        yield made


def drop_store(kind: str, prefix: str) -> None:
    """Remove a test's Redis keys (``prefix``) or PostgreSQL schema (named ``prefix``)."""
    if kind == "redis":
        client = redis.Redis.from_url(REDIS_URL)
        for key in client.scan_iter(f"{prefix}:*"):
            client.delete(key)
        client.close()
    elif kind == "postgres":
        from tests.fast.conformance.stores import PG_URL

        drop_pg_schema(PG_URL, prefix)


def run(store: Store, *args: str, input: str | None = None) -> Result:
    obj = CLIContext(app=store.app, no_color=True, workdir=None, quiet=False)
    return CliRunner().invoke(plus, list(args), obj=obj, input=input)


def as_json(result: Result) -> Any:
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


# -- listing ---------------------------------------------------------------------------
def test_dlq_ls_prints_an_aligned_table_newest_first(store: Store) -> None:
    store.dead("job-1", args=["alice@example.com"])
    store.dead("job-2", task="proj.bill", queue="billing", error="card declined")
    result = run(store, "dlq", "ls")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    header = lines[0]
    assert header.split() == ["TASK", "ID", "TASK", "QUEUE", "FAILED", "DL", "ERROR"]
    rows = lines[1:3]
    assert [r.split()[0] for r in rows] == ["job-2", "job-1"]
    queue_col = header.index("QUEUE")
    assert rows[0][queue_col:].startswith("billing") and rows[1][queue_col:].startswith("celery")
    assert "ConnectionError: card declined" in rows[0]
    assert lines[-1] == "page 1/1, 2 failed jobs"


def test_dlq_ls_json_is_filtered_and_paged(store: Store) -> None:
    for i in range(3):
        store.dead(f"m{i}", args=[f"user{i}"])
    store.dead("b0", task="proj.bill")
    page = as_json(run(store, "dlq", "ls", "--task", "proj.mail", "--per-page", "2",
                       "--page", "2", "--json"))
    assert (page["total"], page["pages"], page["page"]) == (3, 2, 2)
    assert [i["id"] for i in page["items"]] == ["m0"]
    item = page["items"][0]
    assert item["state"] == "failed" and item["exc_type"] == "ConnectionError"
    assert item["args_repr"] == "('user0',)"
    found = as_json(run(store, "dlq", "ls", "--text", "USER2", "--since", "1h", "--json"))
    assert [i["id"] for i in found["items"]] == ["m2"]
    assert as_json(run(store, "dlq", "ls", "--until", "2000-01-01", "--json"))["total"] == 0


def test_dlq_ls_with_nothing_to_show(store: Store) -> None:
    result = run(store, "dlq", "ls")
    assert result.exit_code == 0 and result.stdout.strip() == "no failed jobs"


def test_bad_options_are_usage_errors(store: Store) -> None:
    for args in (["dlq", "ls", "--since", "yesterday-ish"], ["dlq", "ls", "--page", "0"],
                 ["jobs", "nonsense"], ["dlq", "purge", "--state", "running", "--all"],
                 ["dlq", "retry", "--older-than", "soon"]):
        result = run(store, *args)
        assert result.exit_code == 2, (args, result.output)


# -- show --------------------------------------------------------------------------------
def test_dlq_show_prints_the_message_history_and_traceback(store: Store) -> None:
    store.dead("job-1", args=["alice@example.com"], unique_lock="K", unique_window="running")
    result = run(store, "dlq", "show", "job-1")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert "Task id:      job-1" in out and "State:        failed" in out
    assert 'Args:         ["alice@example.com"]' in out
    assert "Last error:   ConnectionError: SMTP down" in out
    assert "Unique key:   K (running window; held by nobody)" in out
    assert "History:" in out and "task failed" in out
    assert out.rstrip().endswith("ConnectionError: SMTP down")  # the traceback closes it
    detail = as_json(run(store, "dlq", "show", "job-1", "--json"))
    assert detail["id"] == "job-1" and detail["args"] == ["alice@example.com"]
    assert detail["history"][-1]["outcome"] == "task failed"


def test_dlq_show_of_an_unknown_job_exits_1(store: Store) -> None:
    result = run(store, "dlq", "show", "nope")
    assert result.exit_code == 1 and "job 'nope' not found" in result.output
    assert as_json(run(store, "dlq", "show", "nope", "--json"))["error"] == "not found"


# -- retry, discard, cancel --------------------------------------------------------------
def test_dlq_retry_by_id_and_its_idempotent_repeat(store: Store) -> None:
    store.dead("job-1")
    result = run(store, "dlq", "retry", "job-1")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == "retried job-1 (failed -> enqueued)"
    assert store.state("job-1") == "enqueued"
    again = run(store, "dlq", "retry", "job-1")
    assert again.exit_code == 0
    assert again.stdout.strip() == "job-1: enqueued, not failed; nothing to retry"
    report = as_json(run(store, "dlq", "retry", "job-1", "--json"))
    assert report == {"results": [{"job_id": "job-1", "action": "retry", "changed": False,
                                   "state": "enqueued", "previous": "enqueued"}],
                      "errors": []}


def test_dlq_retry_exits_1_on_an_unknown_job_or_a_conflict(store: Store) -> None:
    store.dead("job-1", unique_lock="K", unique_window="running")
    store.job("holder", unique_lock="K", unique_window="running")
    result = run(store, "dlq", "retry", "job-1", "nope")
    assert result.exit_code == 1
    assert "held by job 'holder'" in result.output and "'nope' not found" in result.output
    assert store.state("job-1") == "failed"
    report = as_json(run(store, "dlq", "retry", "job-1", "--json"))
    assert report["errors"] == [{"id": "job-1", "error": "conflict", "holder": "holder",
                                 "lock": "K", "message": report["errors"][0]["message"]}]


def test_dlq_discard(store: Store) -> None:
    store.dead("job-1")
    result = run(store, "dlq", "discard", "job-1")
    assert result.exit_code == 0 and "discarded job-1 (failed -> discarded)" in result.stdout
    assert store.state("job-1") == "discarded"
    assert run(store, "dlq", "discard", "nope").exit_code == 1
    assert run(store, "dlq", "discard").exit_code == 2  # a task id is required


def test_cancel_waiting_jobs(store: Store) -> None:
    store.job("wait")
    result = run(store, "cancel", "wait", "--json")
    assert as_json(result)["results"][0]["state"] == "canceled"
    assert store.state("wait") == "canceled"
    assert "not waiting" in run(store, "cancel", "wait").stdout


# -- bulk ------------------------------------------------------------------------------
def test_bulk_retry_needs_a_scope_and_a_confirmation(store: Store) -> None:
    store.dead("m1")
    store.dead("b1", task="proj.bill")
    unscoped = run(store, "dlq", "retry")
    assert unscoped.exit_code == 2 and "--all" in unscoped.output
    both = run(store, "dlq", "retry", "m1", "--task", "proj.mail")
    assert both.exit_code == 2
    declined = run(store, "dlq", "retry", "--task", "proj.mail", input="n\n")
    assert declined.exit_code == 1 and "Retry the dead letters of task proj.mail?" in \
        declined.output
    assert store.state("m1") == "failed"
    accepted = run(store, "dlq", "retry", "--task", "proj.mail", input="y\n")
    assert accepted.exit_code == 0 and "retried 1 of 1 dead letters" in accepted.output
    assert store.state("m1") == "enqueued" and store.state("b1") == "failed"
    report = as_json(run(store, "dlq", "retry", "--all", "--yes", "--json"))
    assert report == {"action": "retry", "matched": 1, "changed": 1, "ids": ["b1"],
                      "conflicts": [], "stopped": None}


def test_bulk_retry_with_a_conflict_exits_1(store: Store) -> None:
    store.dead("a", unique_lock="K", unique_window="running")
    store.dead("b", unique_lock="K", unique_window="running")
    result = run(store, "dlq", "retry", "--all", "--yes")
    assert result.exit_code == 1
    assert "retried 1 of 2 dead letters" in result.stdout
    assert "conflict: b not retried, its unique key is held by a" in result.stdout


def test_purge_asks_unless_yes_and_deletes_for_good(store: Store) -> None:
    store.dead("m1")
    store.dead("b1", task="proj.bill", queue="billing")
    assert run(store, "dlq", "purge").exit_code == 2
    declined = run(store, "dlq", "purge", "--all", input="n\n")
    assert declined.exit_code == 1 and "Delete the failed jobs of ALL for good?" in \
        declined.output
    assert store.state("m1") == "failed"
    by_queue = run(store, "dlq", "purge", "--queue", "billing", "--yes")
    assert by_queue.exit_code == 0 and "purged 1 of 1 failed jobs" in by_queue.stdout
    assert inspector_for(store.backend).job("b1") is None and store.state("m1") == "failed"
    run(store, "dlq", "discard", "m1")
    report = as_json(run(store, "dlq", "purge", "--state", "discarded", "--older-than", "0s",
                         "--yes", "--json"))
    assert report["ids"] == ["m1"] and inspector_for(store.backend).job("m1") is None


# -- jobs and status ---------------------------------------------------------------------
def test_jobs_counts_states_and_lists_one(store: Store) -> None:
    store.dead("f1")
    store.job("e1", args=[1, 2])
    store.job("s1", eta_ms=store.backend.now_ms() + 60_000)
    counts = run(store, "jobs")
    assert counts.exit_code == 0
    rows = dict(line.split() for line in counts.stdout.splitlines()[1:])
    assert rows == {"enqueued": "1", "scheduled": "1", "blocked": "0", "running": "0",
                    "reserved": "0", "completed": "0", "failed": "1", "canceled": "0",
                    "discarded": "0"}
    assert as_json(run(store, "jobs", "--json"))["failed"] == 1
    listing = run(store, "jobs", "enqueued")
    assert listing.exit_code == 0
    assert listing.stdout.splitlines()[0].split()[-1] == "ARGS"
    assert "(1, 2)" in listing.stdout
    assert [i["id"] for i in as_json(run(store, "jobs", "scheduled", "--json"))["items"]] == [
        "s1"]


def test_status_shows_queues_groups_and_dead_letters(store: Store) -> None:
    store.dead("f1", queue="mail")
    store.job("run", concurrency_group="g", concurrency_limit=1)
    assert [c.job_id for c in store.backend.claim(["celery"], "w", 1).claims] == ["run"]
    store.job("parked", concurrency_group="g", concurrency_limit=1)
    assert store.backend.claim(["celery"], "w", 1).blocked == ["parked"]
    store.job("ready", queue="mail")
    result = run(store, "store-status")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["QUEUE", "ENQUEUED", "SCHEDULED", "BLOCKED", "RUNNING",
                                "RESERVED", "FAILED", "OLDEST", "WAITING"]
    assert lines[1].split()[:7] == ["celery", "0", "0", "1", "1", "0", "0"]
    assert lines[2].split()[:7] == ["mail", "1", "0", "0", "0", "0", "1"]
    assert "CONCURRENCY GROUP" in result.stdout and "dead letters: 1" in result.stdout
    report = as_json(run(store, "store-status", "--json"))
    assert report["dead_letters"] == 1 and report["groups"] == [
        {"group": "g", "running": 1, "limit": 1, "blocked": 1}]
    assert report["oldest_waiting_age_s"] >= 0


def test_an_app_without_a_durable_store_is_a_usage_error() -> None:
    app = Celery("plain", broker="redis://127.0.0.1:6379/0", set_as_current=False)
    obj = CLIContext(app=app, no_color=True, workdir=None, quiet=False)
    result = CliRunner().invoke(plus, ["store-status"], obj=obj)
    assert result.exit_code == 2 and "celery-plus durable stores" in result.output


@pytest.mark.parametrize(("broker", "code", "says"), [
    ("plus+redis://127.0.0.1:1/0", 1, "the store cannot be reached: ConnectionError"),
    ("plus+postgresql://root@127.0.0.1:1/test", 1,
     "the store cannot be reached: StoreUnavailable"),
    ("plus+sqlite:////nonexistent-dir/store.db", 2, "directory '/nonexistent-dir'")])
def test_a_store_that_cannot_be_reached_is_one_line_not_a_traceback(
        broker: str, code: int, says: str) -> None:
    app = Celery("down", broker=broker, set_as_current=False)
    obj = CLIContext(app=app, no_color=True, workdir=None, quiet=False)
    for args in (["store-status"], ["jobs"], ["dlq", "ls"], ["dlq", "show", "x"], ["cancel", "x"],
                 ["dlq", "purge", "--all", "--yes"], ["schedules", "ls"]):
        result = CliRunner().invoke(plus, args, obj=obj)
        assert result.exit_code == code and isinstance(result.exception, SystemExit), (
            args, result.exception)
        assert says in result.output and "Traceback" not in result.output, (args, result.output)


def test_the_web_dashboard_is_celery_plus_admin_on_localhost() -> None:
    admin_cmd, alias = plus.commands["admin"], plus.commands["dashboard"]
    host = next(p for p in admin_cmd.params if p.name == "host")
    assert host.default == "127.0.0.1"
    assert alias.hidden and alias.callback is admin_cmd.callback
    assert [p.name for p in alias.params] == [p.name for p in admin_cmd.params]
    listing = CliRunner().invoke(plus, ["--help"]).output
    assert "  admin " in listing and "  dashboard " not in listing
    assert "127.0.0.1" in CliRunner().invoke(plus, ["admin", "--help"]).output


# -- helpers ---------------------------------------------------------------------------
@pytest.mark.parametrize(("text", "seconds"), [
    ("90", 90), ("90s", 90), ("15m", 900), ("2h", 7200), ("1d", 86400), ("1h30m", 5400),
    ("1w", 604800), ("0.5s", 0.5)])
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "h", "1x", "1h 2", "m5"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_moments_are_times_or_ages() -> None:
    assert parse_moment("2h").total_seconds() == 7200  # type: ignore[union-attr]
    assert parse_moment("2025-01-31T12:00").year == 2025  # type: ignore[union-attr]


def test_table_aligns_columns() -> None:
    assert table(["A", "LONGER"], [["xxxx", 1], ["y", 22]]).splitlines() == [
        "A     LONGER", "xxxx  1", "y     22"]


def test_the_commands_are_on_the_plus_group() -> None:
    assert {"dlq", "jobs", "cancel", "store-status", "tasks", "bulk"} <= set(plus.commands)
    dlq = plus.commands["dlq"]
    assert isinstance(dlq, click.Group)
    assert set(dlq.commands) == {"ls", "show", "retry", "discard", "purge", "groups",
                                 "retry-group", "discard-group"}


# -- issue 14: what reaches the operator's terminal, bad numbers, Ctrl-C ----------------------
HIDDEN = ("\x1b", "\x07", "\u202e", "\x9b")


def test_terminal_escapes_and_bidi_overrides_are_spelled_out(store: Store) -> None:
    store.dead("esc-1", task="proj.\x1b]0;pwned\x07", queue="q\x1b[2J",
               error="\u202eevil\x1b[31m red\x9b", args=["\x1b[2J"])
    for args in (["dlq", "ls"], ["dlq", "show", "esc-1"], ["store-status"], ["jobs", "failed"],
                 ["dlq", "ls", "--json"], ["dlq", "show", "esc-1", "--json"]):
        done = run(store, *args)
        assert done.exit_code == 0, done.output
        assert not any(c in done.output for c in HIDDEN), (args, done.output)
    assert "q\\x1b[2J" in run(store, "store-status").output
    shown = run(store, "dlq", "show", "esc-1").output
    assert "Task:         proj.\\x1b]0;pwned\\x07" in shown
    assert "Last error:   ConnectionError: \\u202eevil\\x1b[31m red\\x9b" in shown
    # a value cannot forge a line of its own either
    store.dead("nl-1", task="proj.x\nState:        completed")
    assert "State:        completed" not in run(store, "dlq", "show", "nl-1").output


def test_bad_numbers_and_text_are_usage_errors(store: Store) -> None:
    for args in (["dlq", "ls", "--page", "99999999999999999999"],
                 ["dlq", "ls", "--page", "-1"], ["dlq", "ls", "--per-page", "0"],
                 ["dlq", "ls", "--since", "99999999999999999999d"],
                 ["dlq", "ls", "--until", "\x1b[2J"], ["dlq", "ls", "--task", "a\x00b"],
                 ["dlq", "ls", "--text", "\udcff"], ["jobs", "failed", "--sort", "up"],
                 ["dlq", "purge", "--older-than", "99999999999999999999d", "--yes"],
                 ["dlq", "purge", "--queue", "\x00", "--yes"], ["dlq", "show", "a\x00b"],
                 ["admin", "--allowed-host", "bad host!"]):
        done = run(store, *args)
        assert done.exit_code == 2, (args, done.exit_code, done.output)
        assert done.exception is None or isinstance(done.exception, SystemExit), args
        assert "Traceback" not in done.output and "\x1b" not in done.output, args


def test_an_interrupted_purge_says_how_many_it_deleted(store: Store,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Ctrl-C in the middle of a purge (here: after its second batch of two) reports the
    batches already deleted and exits 130; the store holds the rest."""
    from celery_plus.model.admin import batches
    from celery_plus.stores.admin_base import orchestration

    for n in range(7):
        store.dead(f"p{n}")

    stop_at = {"batch": 2}

    def interrupted(ids: Any, size: int = 2) -> Any:
        for n, chunk in enumerate(batches(ids, 2)):
            if n == stop_at["batch"]:
                raise KeyboardInterrupt  # Ctrl-C between two batches
            yield chunk

    monkeypatch.setattr(orchestration, "batches", interrupted)
    done = run(store, "dlq", "purge", "--all", "--yes")
    assert done.exit_code == 130, done.output
    assert ("interrupted: purged 4 of 7 failed jobs before Ctrl-C (a batch of up to 500 more "
            "may have been changed as well; run the command again to finish)") in done.output
    assert sum(store.state(f"p{n}") is None for n in range(7)) == 4
    stop_at["batch"] = 1
    retried = run(store, "dlq", "retry", "--all", "--yes", "--json")
    assert retried.exit_code == 130 and '"interrupted": true' in retried.output
    assert '"changed": 2' in retried.output


def test_admin_without_waitress_names_the_extra(store: Store,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "waitress.server", None)  # not installed
    done = run(store, "admin", "--port", "8099")
    assert done.exit_code == 1
    assert "pip install 'celery-plus[admin]'" in done.output


# -- beat's schedules ---------------------------------------------------------------------
def test_schedules_ls_pause_resume_and_rm(store: Store) -> None:
    store.backend.schedule_register("nightly", 1_796_000_000_000, "proj.report",
                                    "<crontab: 0 3 * * * (m/h/dM/MY/d)>")
    store.backend.schedule_register("every-5s", 1_796_000_000_000, "proj.tick",
                                    "<freq: 5.00 seconds>")
    result = run(store, "schedules", "ls")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split()[:4] == ["SCHEDULE", "TASK", "EVERY", "STATE"]
    assert [line.split()[0] for line in lines[1:]] == ["every-5s", "nightly"]
    assert "active" in lines[2] and "2026-" in lines[2]

    result = run(store, "schedules", "pause", "nightly", "missing")
    assert result.exit_code == 1
    assert "paused nightly" in result.stdout and "no schedule entry named 'missing'" in (
        result.stderr)
    [paused] = [e for e in as_json(run(store, "schedules", "ls", "--json"))
                if e["name"] == "nightly"]
    assert paused["paused"] is True and paused["task"] == "proj.report"
    result = run(store, "schedules", "resume", "nightly", "--json")
    assert result.exit_code == 0
    assert as_json(result)["changed"][0]["paused"] is False

    assert run(store, "schedules", "rm", "every-5s").exit_code == 0
    assert run(store, "schedules", "rm", "every-5s").exit_code == 1
    assert [s.name for s in store.backend.schedules()] == ["nightly"]
