"""Beat's tick arithmetic (celery_plus/beat.py): the due time after a stored last tick, by
Celery's own schedule classes (intervals, crontab, solar) and a user's ``BaseSchedule``
subclass, is the same whenever and wherever it is computed — the premise of a tick's
identity (entry, due time) — including crontab entries across daylight saving time changes
in a non-UTC ``timezone``."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest
from celery import Celery
from celery.schedules import BaseSchedule, crontab, schedule, solar

from celery_plus.beat import _at, _ms, due_after, latest_due


def ticks(entry: schedule, start: datetime, count: int) -> list[int]:
    """``count`` ticks after ``start``, each computed at several moments (just after the
    last tick, halfway, just before the next, and up to 50 minutes late): all must agree."""
    clock = [start]
    entry.nowfun = lambda: clock[0]
    out, last = [], _ms(start)
    for _ in range(count):
        clock[0] = _at(last)
        due = due_after(entry, last)
        for at in (last + (due - last) // 2, due - 1, due, due + 600_000, due + 3_000_000):
            clock[0] = _at(at)
            assert due_after(entry, last) == due, (_at(last), _at(due), clock[0])
        assert due > last
        out.append(due)
        last = due
    return out


def local(due_ms: int, zone: str) -> str:
    return _at(due_ms).astimezone(ZoneInfo(zone)).strftime("%m-%d %H:%M%z")


@pytest.fixture
def berlin() -> Celery:
    app = Celery(set_as_current=False)
    app.conf.timezone = "Europe/Berlin"
    return app


def test_a_daily_crontab_at_an_hour_that_does_not_exist_runs_an_hour_later(
        berlin: Celery) -> None:
    # 2026-03-29 02:00 CET: clocks go to 03:00 CEST; 02:30 does not exist that day.
    due = ticks(crontab(hour=2, minute=30, app=berlin),
                datetime(2026, 3, 27, 12, tzinfo=timezone.utc), 3)
    assert [local(d, "Europe/Berlin") for d in due] == [
        "03-28 02:30+0100", "03-29 03:30+0200", "03-30 02:30+0200"]


def test_an_hourly_crontab_across_both_changes_runs_each_wall_clock_hour_once(
        berlin: Celery) -> None:
    spring = ticks(crontab(minute=0, app=berlin), datetime(2026, 3, 28, 23, tzinfo=timezone.utc), 3)
    assert [local(d, "Europe/Berlin") for d in spring] == [
        "03-29 01:00+0100", "03-29 03:00+0200", "03-29 04:00+0200"]
    # 2026-10-25 03:00 CEST: clocks go back to 02:00 CET; 02:xx happens twice, runs once.
    autumn = ticks(crontab(minute=0, app=berlin),
                   datetime(2026, 10, 24, 22, 30, tzinfo=timezone.utc), 4)
    assert [local(d, "Europe/Berlin") for d in autumn] == [
        "10-25 01:00+0200", "10-25 02:00+0200", "10-25 03:00+0100", "10-25 04:00+0100"]


def test_an_interval_counts_real_time_across_a_change(berlin: Celery) -> None:
    start = datetime(2026, 3, 29, 0, 15, tzinfo=timezone.utc)  # 01:15 CET
    due = ticks(schedule(timedelta(minutes=30), app=berlin), start, 4)
    assert [b - a for a, b in pairwise([_ms(start), *due])] == [1_800_000] * 4


def test_the_latest_missed_tick_is_the_one_ticks_reach(berlin: Celery) -> None:
    entry = crontab(minute="*/20", app=berlin)
    start = datetime(2026, 10, 24, 23, 50, tzinfo=timezone.utc)
    every = ticks(entry, start, 9)
    entry.nowfun = lambda: _at(every[-1] + 1000)
    assert latest_due(entry, _ms(start), every[-1] + 1000) == every[-1]


def test_a_solar_schedule_ticks_at_each_sunrise(berlin: Celery) -> None:
    due = ticks(solar("sunrise", 52.52, 13.40, app=berlin),
                datetime(2026, 3, 27, 12, tzinfo=timezone.utc), 4)
    days = [_at(d).astimezone(ZoneInfo("Europe/Berlin")) for d in due]
    assert [d.day for d in days] == [28, 29, 30, 31]
    assert all(5 <= d.hour <= 7 for d in days), days  # Berlin's sunrise, in late March


class EveryOtherMinute(BaseSchedule):
    """A user's schedule class: honours ``nowfun`` through ``self.now()``, as Celery's do."""

    def remaining_estimate(self, last_run_at: datetime) -> timedelta:
        return last_run_at + timedelta(minutes=2) - self.now()

    def is_due(self, last_run_at: datetime) -> tuple[bool, float]:
        left = self.remaining_estimate(last_run_at).total_seconds()
        return left <= 0, max(left, 0.0)


def test_a_users_schedule_class_ticks_from_the_stored_last_tick(berlin: Celery) -> None:
    start = datetime(2026, 10, 25, 0, 30, tzinfo=timezone.utc)
    due = ticks(EveryOtherMinute(app=berlin), start, 3)
    assert [b - a for a, b in pairwise([_ms(start), *due])] == [120_000] * 3


class DailyAtWallClock(BaseSchedule):
    """A schedule that reads the wall clock of the last run it is given, as Celery's crontab
    did before Celery 5.7 (and a user's schedule class still may): Celery beat hands
    schedules their last run in the app's timezone, so must beat on the store."""

    def __init__(self, hour: int, minute: int, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.hour, self.minute = hour, minute

    def remaining_estimate(self, last_run_at: datetime) -> timedelta:
        at = last_run_at.replace(hour=self.hour, minute=self.minute, second=0, microsecond=0)
        if at <= last_run_at:
            at += timedelta(days=1)
        return at - self.now()

    def is_due(self, last_run_at: datetime) -> tuple[bool, float]:
        left = self.remaining_estimate(last_run_at).total_seconds()
        return left <= 0, max(left, 0.0)


def test_a_schedule_sees_its_last_run_in_the_apps_timezone(berlin: Celery) -> None:
    due = ticks(DailyAtWallClock(2, 30, app=berlin),
                datetime(2026, 6, 1, 12, tzinfo=timezone.utc), 2)
    assert [local(d, "Europe/Berlin") for d in due] == ["06-02 02:30+0200", "06-03 02:30+0200"]
