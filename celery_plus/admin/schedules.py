"""The admin of periodic schedules (docs/schedules.md): list, pause, resume, forget.

Beat keeps its entries in the store (``celery_plus/beat.py``); these read and change them
through the store interface (``Backend.schedules`` / ``schedule_pause``), the same on every
store. A pause takes effect at the entry's next tick, whichever beat process leads: its
ticks pass without jobs until it is resumed (the ticks due meanwhile are not run later).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from celery_plus.admin.params import check_text
from celery_plus.model.admin import AdminError
from celery_plus.model.store import Backend, ScheduleRecord


class ScheduleNotFound(AdminError, KeyError):
    """No schedule entry of this name in the store (beat never registered it)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.name = name

    def __str__(self) -> str:
        return f"no schedule entry named {self.name!r} in the store"


@dataclass(frozen=True)
class Schedule:
    """One entry as the store keeps it: its last tick (fired, skipped or passed while
    paused) and next one as the leading beat computed it, in ms since the epoch (0: none)."""

    name: str
    task: str
    schedule: str
    paused: bool
    last_due_ms: int
    next_due_ms: int
    last_job_id: str
    fired: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _schedule(record: ScheduleRecord) -> Schedule:
    return Schedule(name=record.name, task=record.task, schedule=record.schedule,
                    paused=record.paused, last_due_ms=record.last_due_ms,
                    next_due_ms=record.next_due_ms, last_job_id=record.last_job_id,
                    fired=record.fired)


def list_schedules(backend: Backend) -> list[Schedule]:
    """Every schedule entry, by name."""
    return [_schedule(r) for r in backend.schedules()]


def set_paused(backend: Backend, name: str, paused: bool) -> Schedule:
    """Pause or resume entry ``name`` (idempotent); the entry afterwards. Raises
    :class:`ScheduleNotFound`."""
    check_text("schedule", name)
    if not name or not backend.schedule_pause(name, paused):
        raise ScheduleNotFound(name)
    for schedule in list_schedules(backend):
        if schedule.name == name:
            return schedule
    raise ScheduleNotFound(name)


def forget(backend: Backend, name: str) -> None:
    """Delete entry ``name`` from the store (one no longer in ``beat_schedule``; a configured
    one is registered again, afresh, by the next beat that starts or leads). Raises
    :class:`ScheduleNotFound`."""
    check_text("schedule", name)
    if not name or not backend.schedule_delete(name):
        raise ScheduleNotFound(name)
