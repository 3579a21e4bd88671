"""A publisher's look at which stored formats the live workers read (``stores/readers.py``).

Pure logic: the records and both clocks are the test's. What a real store keeps of a record's
``reads`` is the conformance suite's (``test_worker_records.py``); a Redis publisher acting on
it, ``test_redis_record_layout.py``.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest

from celery_plus.model import formats
from celery_plus.model.store import WorkerBeat
from celery_plus.stores.readers import Readers, readers_for

NOW_MS = 1_700_000_000_000
SETTING = "plus_redis_compact_records = False"


@pytest.fixture(autouse=True)
def transport_log_enabled() -> Iterator[None]:
    """The publisher's log lines reach handlers: a logging set-up of an earlier test in this
    process (Celery's worker, ``dictConfig``) may have disabled the logger or left an ancestor's
    level above WARNING (one of these tests failed so in two full runs: no record at all)."""
    log = logging.getLogger("celery_plus.transport")
    disabled, level, off = log.disabled, log.level, logging.root.manager.disable
    log.disabled = False
    log.setLevel(logging.INFO)  # whatever level an ancestor was left at
    logging.disable(logging.NOTSET)
    yield
    log.disabled = disabled
    log.setLevel(level)
    logging.disable(off)


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

    worker_beats = records

    def now_ms(self) -> int:
        return NOW_MS


def beat(node: str, reads: tuple[str, ...] = formats.READS, age_ms: int = 0) -> WorkerBeat:
    return WorkerBeat(node=node, host="h", pid=1, interval_ms=2000, at_ms=NOW_MS - age_ms,
                      reads=reads)


class Watch:
    """A :class:`Readers` asked through one store, as a publisher asks it."""

    def __init__(self, store: Store, clock: list[float] | None = None) -> None:
        self.store = store
        self.readers = Readers(SETTING, every=10.0,
                               clock=(lambda: clock[0]) if clock else time.monotonic)

    def all_read(self, fmt: str) -> bool:
        return self.readers.all_read(fmt, self.store)


def readers(store: Store, clock: list[float]) -> Watch:
    return Watch(store, clock)


def test_every_live_worker_must_read_the_format() -> None:
    store = Store(beat("new@h"), beat("old@h", reads=(formats.JSON,)))
    watch = readers(store, [0.0])
    assert watch.all_read(formats.JSON)
    assert not watch.all_read(formats.Z1)
    assert not watch.all_read("z9")  # a format no worker announces


def test_a_gone_worker_does_not_count_a_late_one_does() -> None:
    # Interval 2 s: late within 6 intervals and a second (13 s), gone after.
    late = Watch(Store(beat("old@h", reads=(formats.JSON,), age_ms=12_000)))
    gone = Watch(Store(beat("old@h", reads=(formats.JSON,), age_ms=14_000)))
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


def test_while_the_first_look_is_in_flight_others_get_the_older_format() -> None:
    """A publisher thread asking while another makes the first look gets no (the format
    every worker reads), not an answer from the records not read yet."""
    store = Store(beat("old@h", reads=(formats.JSON,)))
    entered, go_on = threading.Event(), threading.Event()
    records = store.records

    def slow_records() -> list[WorkerBeat]:
        entered.set()
        go_on.wait(10)
        return records()

    store.worker_beats = slow_records  # type: ignore[method-assign]
    watch = Watch(store)
    answers: list[bool] = []
    first = threading.Thread(target=lambda: answers.append(watch.all_read(formats.Z1)))
    first.start()
    assert entered.wait(10)
    assert not watch.all_read(formats.Z1)  # asked meanwhile: no look made, none waited for
    go_on.set()
    first.join(10)
    assert answers == [False] and store.looks == 1


def test_until_a_look_succeeds_the_answer_is_the_older_format() -> None:
    store = Store()  # no worker: every live worker reads anything, once looked at
    store.fail = True
    clock = [0.0]
    watch = readers(store, clock)
    assert not watch.all_read(formats.Z1) and not watch.all_read(formats.JSON)
    clock[0] = 5.0
    assert not watch.all_read(formats.Z1) and store.looks == 1
    store.fail, clock[0] = False, 10.0
    assert watch.all_read(formats.Z1) and store.looks == 2


def test_the_change_is_logged_outside_the_lock(caplog: pytest.LogCaptureFixture) -> None:
    watch = readers(Store(beat("old@h", reads=(formats.JSON,))), [0.0])
    free: list[bool] = []

    class Probe(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.thread != threading.get_ident():
                return  # another test's thread still logging (a keeper, a pool's renewal)
            lock = watch.readers._lock
            free.append(lock.acquire(blocking=False))
            if free[-1]:
                lock.release()

    probe = Probe(logging.WARNING)
    logging.getLogger("celery_plus.transport").addHandler(probe)
    try:
        assert not watch.all_read(formats.Z1)
    finally:
        logging.getLogger("celery_plus.transport").removeHandler(probe)
    assert free == [True]


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork")
def test_a_child_forked_while_the_lock_is_held_gets_it_free() -> None:
    watch = readers(Store(beat("new@h")), [0.0])
    with watch.readers._lock:
        pid = os.fork()
        if pid == 0:  # the child: answers (its lock re-made), within the alarm's 5 s
            signal.alarm(5)
            os._exit(0 if watch.all_read(formats.Z1) else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


def test_one_readers_per_store_identity() -> None:
    a = readers_for(("redis://h/0", "t-one"), SETTING)
    assert readers_for(("redis://h/0", "t-one"), SETTING) is a
    assert readers_for(("redis://h/0", "t-two"), SETTING) is not a
    assert readers_for(("redis://h/1", "t-one"), SETTING) is not a
