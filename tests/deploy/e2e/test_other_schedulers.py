"""Another ``beat_scheduler`` on a plus store (issue #30 point 2; docs/schedules.md, "Other
schedulers"): two real ``celery-plus beat`` processes run a scheduler that is not
celery-plus's and keeps its entries in a database (:mod:`tests.deploy.e2e.db_scheduler`, a
small one of its own, django-celery-beat's ``DatabaseScheduler`` and, in the long run,
RedBeat's ``RedBeatScheduler``); each tick is still sent once, an entry added to the database
while they run included, and each beat's log says which scheduler runs and that its ticks are
fenced. Before the fence every tick ran twice.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from celery.beat import ScheduleEntry, Scheduler
from celery.schedules import schedule as every
from freezegun import freeze_time

from celery_plus.beat import fence_scheduler, tick_id
from celery_plus.model.store import Backend
from tests.deploy.e2e.conftest import Worker
from tests.deploy.e2e.db_scheduler import add_entry
from tests.deploy.e2e.periodic_checks import ROOT, Beat, fired, tick_report
from tests.deploy.e2e.proj import events
from tests.support import wait_until

APP = "tests.deploy.e2e.periodic_proj"
SCHEDULER = "tests.deploy.e2e.db_scheduler:DBScheduler"
DCB_APP = "tests.deploy.e2e.dcb_proj"
DCB_SCHEDULER = "django_celery_beat.schedulers:DatabaseScheduler"
REDBEAT_APP = "tests.deploy.e2e.redbeat_proj"
REDBEAT_SCHEDULER = "redbeat.RedBeatScheduler"
EVERY_MS = 1000
FENCED = "is not celery-plus's: its entries, last runs and timing are its own"


@pytest.fixture
def beats_of(tmp_path: Path, prefix: str,
             broker_url: str) -> Iterator[Callable[[str, str, dict[str, str]], Beat]]:
    started: list[Beat] = []

    def start(app: str, scheduler: str, env: dict[str, str]) -> Beat:
        beat = Beat(tmp_path / f"beat-{len(started)}.log",
                    {"PLUS_TEST_PREFIX": prefix, "PLUS_TEST_BEAT_EVERY": str(EVERY_MS / 1000),
                     **env}, app=app, args=["--scheduler", scheduler])
        started.append(beat)
        return beat

    yield start
    for beat in started:
        beat.stop()


@pytest.mark.parametrize("scheduler", ["db_scheduler", "django_celery_beat",
                                       pytest.param("redbeat", marks=pytest.mark.long)])
def test_two_beats_of_a_database_scheduler_send_each_tick_once(
        scheduler: str, beats_of: Callable[[str, str, dict[str, str]], Beat],
        start_worker: Callable[..., Worker], prefix: str, tmp_path: Path) -> None:
    """Two beats of a database scheduler, an entry added to its database while they run."""
    if scheduler == "db_scheduler":
        path = str(tmp_path / "schedule.db")
        env = {"PLUS_TEST_SCHEDULE_DB": path}
        app, cls = APP, SCHEDULER

        def add() -> None:
            add_entry(path, "added", "periodic.tick", EVERY_MS / 1000)
    elif scheduler == "redbeat":
        env, app, cls = {}, REDBEAT_APP, REDBEAT_SCHEDULER

        def add() -> None:
            subprocess.run([sys.executable, "-m", REDBEAT_APP, "add", "added", "periodic.tick",
                            str(EVERY_MS / 1000)], check=True, cwd=ROOT,
                           env={**os.environ, "PLUS_TEST_PREFIX": prefix}, timeout=120)
    else:
        env = {"PLUS_TEST_DCB_DB": str(tmp_path / "django.db")}
        app, cls = DCB_APP, DCB_SCHEDULER
        subprocess.run([sys.executable, "-m", DCB_APP, "migrate"], check=True, cwd=ROOT,
                       env={**os.environ, **env}, timeout=120)

        def add() -> None:
            subprocess.run([sys.executable, "-m", DCB_APP, "add", "added", "periodic.tick",
                            str(EVERY_MS / 1000)], check=True, cwd=ROOT,
                           env={**os.environ, **env}, timeout=120)
    start_worker(app=APP)
    group = [beats_of(app, cls, env), beats_of(app, cls, env)]
    wait_until(lambda: len(events(prefix, "tick")) >= 6, timeout=60, message="six runs")
    add()  # an admin's edit, no restart
    wait_until(lambda: len(events(prefix, "tick")) >= 16, timeout=60, message="ten more runs")
    for beat in group:
        beat.stop()
    logs = {b.log_path.name: b.log() for b in group}
    by_entry = {entry: fired(logs, entry) for entry in ("tick", "added")}
    sent = sum(len(ticks) for ticks in by_entry.values())
    wait_until(lambda: len(events(prefix, "tick")) >= sent, timeout=30,
               message="the worker ran every tick sent")
    runs = events(prefix, "tick")
    unfenced = [r for r in runs if r.get("due_ms") is None]
    # Before the fence: every run was sent past it, each tick by both beats (twice as many
    # runs as ticks: 18 runs for 9 ticks in the issue).
    assert not unfenced, f"{len(unfenced)} of {len(runs)} runs sent past the fence"
    assert not [i for i, n in Counter(r["id"] for r in runs).items() if n > 1], runs
    for entry, ticks in by_entry.items():
        report = tick_report(ticks, EVERY_MS)
        assert report.ticks >= 3 and report.ok(), (entry, report, logs)
        mine = [r for r in runs if r["entry"] == entry]
        assert sorted(r["due_ms"] for r in mine) == [t.due_ms for t in ticks], (entry, logs)
        assert sorted(r["id"] for r in mine) == sorted(tick_id(entry, t.due_ms) for t in ticks)
    assert len(runs) == sent
    for name, text in logs.items():  # each beat says which scheduler runs, and the fence
        assert text.count(FENCED) == 1 and cls.split(".")[-1] in text, (name, text)


def test_a_fenced_entry_is_sent_once_by_two_schedulers_and_not_while_paused(
        client: Any, view: Backend) -> None:
    """The fence in process: two Celery ``Scheduler`` instances (each a beat process) find
    the same entry due; the store takes one job. Paused from celery-plus's admin, its ticks
    pass without jobs."""
    schedulers = [Scheduler(app=client), Scheduler(app=client)]
    fences = [fence_scheduler(s) for s in schedulers]
    assert all(f is not None for f in fences)

    def due_entry() -> ScheduleEntry:
        return ScheduleEntry(name="e", task="proj.add", args=(1, 2), app=client,
                             schedule=every(timedelta(seconds=10), app=client),
                             last_run_at=client.now() - timedelta(seconds=11))

    try:
        results = [s.apply_async(due_entry(), advance=False) for s in schedulers]
        assert results[0] is not None and results[1] is None
        [record] = view.schedules()
        assert record.fired == 1
        assert results[0].id == tick_id("e", record.last_due_ms)
        assert view.schedule_pause("e", True)
        # The next tick falls due: paused, it passes without a job.
        with freeze_time(client.now() + timedelta(seconds=10)):
            assert schedulers[1].apply_async(due_entry(), advance=False) is None
        [paused] = view.schedules()
        assert paused.fired == 1 and paused.last_due_ms == record.last_due_ms + 10_000
    finally:
        for s in schedulers:
            s.close()


class _NotACeleryScheduler:
    """A scheduler of its own kind: nothing to put a fence in front of."""

    def __init__(self, app: Any) -> None:
        self.app = app


def test_a_scheduler_that_cannot_be_fenced_is_named_in_a_warning(
        client: Any, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="celery_plus.beat"):
        assert fence_scheduler(_NotACeleryScheduler(client)) is None
    [record] = [r for r in caplog.records if r.name == "celery_plus.beat"]
    assert record.levelno == logging.WARNING
    assert "_NotACeleryScheduler" in record.getMessage()
    assert "HA is off (two beat processes both send every tick)" in record.getMessage()


# The prefork variant in the long run: Celery runs an embedded beat in a process of its own
# whatever the pool (celery.beat.EmbeddedService; a thread only under gevent/eventlet), so the
# solo variant already shows the fence in that process.
@pytest.mark.parametrize("pool", ["solo", pytest.param("prefork", marks=pytest.mark.long)])
def test_two_workers_with_django_celery_beat_embedded_send_each_tick_once(
        start_worker: Callable[..., Worker], prefix: str, tmp_path: Path, pool: str) -> None:
    """``worker -B --scheduler …DatabaseScheduler`` on two workers: the fence is put in front
    of the embedded beat's scheduler too (Celery's ``beat_init`` in the beat process)."""
    env = {"PLUS_TEST_DCB_DB": str(tmp_path / "django.db"),
           "PLUS_TEST_BEAT_EVERY": str(EVERY_MS / 1000)}
    subprocess.run([sys.executable, "-m", DCB_APP, "migrate"], check=True, cwd=ROOT,
                   env={**os.environ, **env}, timeout=120)
    workers = [start_worker("-B", f"--schedule={tmp_path / f'celerybeat-{i}'}",
                            f"--scheduler={DCB_SCHEDULER}", app=DCB_APP, pool=pool,
                            concurrency=2 if pool == "prefork" else 1, env=env)
               for i in range(2)]
    wait_until(lambda: len(events(prefix, "tick")) >= 6, timeout=60, message="six runs")
    for worker in workers:
        worker.stop()
    logs = {f"worker-{i}": w.log() for i, w in enumerate(workers)}
    ticks = fired(logs, "tick")
    start_worker(app=APP)  # runs what the stopped workers left enqueued
    wait_until(lambda: len(events(prefix, "tick")) >= len(ticks), timeout=30,
               message="every tick sent was run")
    runs = events(prefix, "tick")
    unfenced = [r for r in runs if r.get("due_ms") is None]
    assert not unfenced, f"{len(unfenced)} of {len(runs)} runs sent past the fence"
    report = tick_report(ticks, EVERY_MS)
    assert report.ticks >= 5 and report.ok(), (report, logs)
    assert sorted(r["due_ms"] for r in runs) == [t.due_ms for t in ticks], logs
    for name, text in logs.items():
        assert text.count(FENCED) == 1 and "DatabaseScheduler" in text, (name, text)
