"""Conformance: role leases and periodic schedule entries (docs/schedules.md).

Rules: a role's lease has one holder at a time, renewed by that holder, free once it lapses or
its holder resigns. A schedule entry is registered once (later registrations keep its times
and pause flag); a tick fires only from the last due time it was computed from — the fence
and the tick's publish are one atomic step, so any number of beat processes fire each tick
exactly once; a paused entry's ticks pass without a job; a skipped tick advances the entry
without a job.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from celery_plus.model.store import Backend, NewJob

from .support import Q, claim, ids, wait_until


def tick_job(job_id: str) -> NewJob:
    return NewJob(id=job_id, queue=Q, message=f"msg-{job_id}", name="proj.tick")


def test_a_role_has_one_holder_until_its_lease_lapses_or_it_resigns(
        make_backend: Callable[..., Backend]) -> None:
    one, two = make_backend(), make_backend()
    assert one.lead("beat", "a", 300)
    assert not two.lead("beat", "b", 300)
    assert one.lead("beat", "a", 300)  # renewed by its holder
    wait_until(lambda: two.lead("beat", "b", 300), timeout=10, message="the lapsed lease")
    assert not one.lead("beat", "a", 300)
    two.resign("beat", "a")  # not the holder: nothing happens
    assert not one.lead("beat", "a", 60_000)
    two.resign("beat", "b")
    assert one.lead("beat", "a", 60_000)
    assert two.lead("other-role", "b", 60_000)


def test_a_role_holder_and_its_lapse_time_are_read_by_store_clock(backend: Backend) -> None:
    assert backend.role_holder("beat") is None
    before = backend.now_ms()
    assert backend.lead("beat", "a", 5_000)
    holder, lapses = backend.role_holder("beat") or ("", 0)
    assert holder == "a" and before + 5_000 <= lapses <= backend.now_ms() + 5_000
    assert backend.lead("beat", "a", 300)  # renewed for less: lapses sooner
    assert (backend.role_holder("beat") or ("", 10**15))[1] <= backend.now_ms() + 300
    wait_until(lambda: backend.role_holder("beat") is None, timeout=10,
               message="a lapsed lease has no holder")
    backend.resign("beat", "a")
    assert backend.role_holder("beat") is None


def test_an_entry_is_registered_once_and_keeps_its_times(backend: Backend) -> None:
    first = backend.schedule_register("every-5s", 1000, "proj.tick", "every 5 seconds")
    assert (first.name, first.last_due_ms, first.paused, first.fired) == ("every-5s", 1000,
                                                                          False, 0)
    again = backend.schedule_register("every-5s", 9999, "proj.tock", "every 6 seconds")
    assert again.last_due_ms == 1000 and (again.task, again.schedule) == ("proj.tock",
                                                                         "every 6 seconds")
    assert [s.name for s in backend.schedules()] == ["every-5s"]
    assert backend.schedule_delete("every-5s") and backend.schedules() == []
    assert not backend.schedule_delete("every-5s")


def test_a_tick_fires_once_from_the_last_due_time_it_was_computed_from(
        make_backend: Callable[..., Backend]) -> None:
    beats = [make_backend() for _ in range(3)]
    beats[0].schedule_register("e", 1000)
    outcomes = [b.schedule_fire("e", 1000, 6000, 11000, tick_job("e@6000")) for b in beats]
    assert outcomes == ["fired", "stale", "stale"]
    entry = beats[0].schedules()[0]
    assert (entry.last_due_ms, entry.next_due_ms, entry.last_job_id, entry.fired) == (
        6000, 11000, "e@6000", 1)
    assert ids(claim(beats[1])) == ["e@6000"]
    assert beats[2].schedule_fire("e", 6000, 11000, 16000, tick_job("e@11000")) == "fired"
    assert beats[0].schedule_fire("missing", 0, 1, 2, tick_job("x")) == "missing"
    assert beats[0].record("x") is None


def test_concurrent_beats_fire_each_tick_exactly_once(
        make_backend: Callable[..., Backend]) -> None:
    import threading

    beats = [make_backend() for _ in range(4)]
    beats[0].schedule_register("e", 0)
    fired: list[int] = []
    lock = threading.Lock()

    def run(backend: Backend) -> None:
        for _ in range(30):
            last = next(s.last_due_ms for s in backend.schedules() if s.name == "e")
            due = last + 100
            if backend.schedule_fire("e", last, due, due + 100, tick_job(f"e@{due}")) \
                    == "fired":
                with lock:
                    fired.append(due)

    threads = [threading.Thread(target=run, args=(b,)) for b in beats]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(fired) == list(range(100, 100 * len(fired) + 1, 100))
    assert len(fired) >= 30
    assert beats[0].schedules()[0].fired == len(fired)


def test_a_paused_entry_passes_its_ticks_without_jobs_and_a_skip_publishes_nothing(
        backend: Backend) -> None:
    backend.schedule_register("e", 0)
    assert backend.schedule_pause("e", True)
    assert backend.schedule_register("e", 0).paused  # registering again keeps the pause
    assert backend.schedule_fire("e", 0, 100, 200, tick_job("e@100")) == "paused"
    assert backend.record("e@100") is None
    assert backend.schedule_pause("e", False)
    assert backend.schedule_fire("e", 100, 200, 300, None) == "skipped"
    assert backend.schedule_fire("e", 200, 300, 400, tick_job("e@300")) == "fired"
    entry = backend.schedules()[0]
    assert (entry.last_due_ms, entry.fired, entry.paused) == (300, 1, False)
    assert not backend.schedule_pause("nope", True)
    assert [s.name for s in backend.schedules()] == ["e"]


def test_role_lease_is_timed_by_the_store_clock(backend: Backend) -> None:
    start = time.monotonic()
    assert backend.lead("r", "a", 200)
    wait_until(lambda: backend.lead("r", "b", 200), timeout=10, message="lapse")
    assert time.monotonic() - start >= 0.19
