"""A publisher's look at which stored formats the live workers read (``stores/readers.py``).

Pure logic: the records and both clocks are the test's. What a real store keeps of a record's
``reads`` is the conformance suite's (``test_worker_records.py``); a Redis publisher acting on
it, ``test_redis_record_layout.py``.
"""

from __future__ import annotations

import logging

import pytest

from celery_plus.model import formats
from celery_plus.model.store import WorkerBeat
from celery_plus.stores.readers import Readers

NOW_MS = 1_700_000_000_000
SETTING = "plus_redis_compact_records = False"


class Store:
    """Worker records and a clock, counting the looks."""

    def __init__(self, *beats: WorkerBeat) -> None:
        self.beats = list(beats)
        self.looks = 0
        self.fail = False

    def records(self) -> list[WorkerBeat]:
        self.looks += 1
        if self.fail:
            raise ConnectionError("store unreachable")
        return self.beats


def beat(node: str, reads: tuple[str, ...] = formats.READS, age_ms: int = 0) -> WorkerBeat:
    return WorkerBeat(node=node, host="h", pid=1, interval_ms=2000, at_ms=NOW_MS - age_ms,
                      reads=reads)


def readers(store: Store, clock: list[float]) -> Readers:
    return Readers(store.records, lambda: NOW_MS, SETTING, every=10.0, clock=lambda: clock[0])


def test_every_live_worker_must_read_the_format() -> None:
    store = Store(beat("new@h"), beat("old@h", reads=(formats.JSON,)))
    watch = readers(store, [0.0])
    assert watch.all_read(formats.JSON)
    assert not watch.all_read(formats.Z1)
    assert not watch.all_read("z9")  # a format no worker announces


def test_a_gone_worker_does_not_count_a_late_one_does() -> None:
    # Interval 2 s: late within 6 intervals and a second (13 s), gone after.
    late = Readers(Store(beat("old@h", reads=(formats.JSON,), age_ms=12_000)).records,
                   lambda: NOW_MS, SETTING)
    gone = Readers(Store(beat("old@h", reads=(formats.JSON,), age_ms=14_000)).records,
                   lambda: NOW_MS, SETTING)
    assert not late.all_read(formats.Z1)
    assert gone.all_read(formats.Z1)


def test_a_record_that_announces_nothing_reads_what_every_recording_release_reads() -> None:
    watch = readers(Store(beat("earlier@h", reads=())), [0.0])
    assert all(watch.all_read(f) for f in formats.UNANNOUNCED)
    assert not watch.all_read("z9")


def test_the_store_is_looked_at_once_per_interval_not_per_publish() -> None:
    store = Store(beat("old@h", reads=(formats.JSON,)))
    clock = [0.0]
    watch = readers(store, clock)
    for _ in range(1000):
        assert not watch.all_read(formats.Z1)
    assert store.looks == 1
    store.beats = [beat("old@h")]  # upgraded: seen at the next look only
    clock[0] = 9.9
    assert not watch.all_read(formats.Z1) and store.looks == 1
    clock[0] = 10.0
    assert watch.all_read(formats.Z1) and store.looks == 2


def test_a_failed_look_keeps_the_last_answer_and_never_raises() -> None:
    store = Store(beat("old@h", reads=(formats.JSON,)))
    clock = [0.0]
    watch = readers(store, clock)
    assert not watch.all_read(formats.Z1)
    store.fail, clock[0] = True, 10.0
    assert not watch.all_read(formats.Z1) and store.looks == 2
    store.fail, clock[0] = False, 20.0
    store.beats = []
    assert watch.all_read(formats.Z1) and store.looks == 3


def test_each_change_is_logged_once_naming_the_workers_and_the_setting(
        caplog: pytest.LogCaptureFixture) -> None:
    store = Store(beat("old@h", reads=(formats.JSON,)))
    clock = [0.0]
    watch = readers(store, clock)
    with caplog.at_level(logging.INFO, logger="celery_plus.transport"):
        for step in range(5):
            clock[0] = 10.0 * step
            watch.all_read(formats.Z1)
        store.beats = []
        for step in range(5, 10):
            clock[0] = 10.0 * step
            watch.all_read(formats.Z1)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    infos = [r for r in caplog.records if r.levelno == logging.INFO]
    assert len(warnings) == 1 and len(infos) == 1, caplog.text
    assert "old@h" in warnings[0].getMessage() and SETTING in warnings[0].getMessage()
    assert "'z1'" in infos[0].getMessage()
