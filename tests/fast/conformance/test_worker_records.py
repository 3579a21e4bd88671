"""Conformance: the Celery workers' own records (``WorkerRecords``; docs/admin.md "Workers").

Rules: a beat stores the worker's info under its node name, stamped with the store's time
(``at_ms``); ``started_ms`` is its first beat, kept while the pid stays the same (a new pid
under the same node name starts anew); records list by node name; a record keeps the stored
formats its worker announces it reads.
"""

from __future__ import annotations

from celery_plus.model import formats
from celery_plus.model.store import Backend, WorkerBeat

from .support import wait_until


def _beat(node: str, pid: int, queues: tuple[str, ...] = ("celery",)) -> WorkerBeat:
    return WorkerBeat(node=node, host="h1", pid=pid, queues=queues, interval_ms=2000)


def test_a_beat_is_recorded_with_the_stores_time(backend: Backend) -> None:
    before = backend.now_ms()
    backend.worker_beat(_beat("w2@h1", 11, ("a", "b")))
    backend.worker_beat(_beat("w1@h1", 10))
    first, second = backend.worker_beats()
    assert (first.node, second.node) == ("w1@h1", "w2@h1")
    assert (second.host, second.pid, second.queues, second.interval_ms) == ("h1", 11,
                                                                            ("a", "b"), 2000)
    assert before <= second.started_ms <= second.at_ms <= backend.now_ms()


def test_started_is_kept_for_the_same_pid_and_starts_anew_for_another(backend: Backend) -> None:
    backend.worker_beat(_beat("w1@h1", 10))
    [first] = backend.worker_beats()
    wait_until(lambda: backend.now_ms() > first.at_ms + 5, timeout=5, message="clock moves")
    backend.worker_beat(_beat("w1@h1", 10, ()))
    [again] = backend.worker_beats()
    assert again.started_ms == first.started_ms and again.at_ms > first.at_ms
    assert again.queues == ()
    wait_until(lambda: backend.now_ms() > again.at_ms + 5, timeout=5, message="clock moves")
    backend.worker_beat(_beat("w1@h1", 99))
    [restarted] = backend.worker_beats()
    assert restarted.pid == 99 and restarted.started_ms == restarted.at_ms > again.at_ms


def test_a_record_keeps_the_formats_its_worker_reads(backend: Backend) -> None:
    """A worker announces the stored formats it reads (publishers look: ``stores/readers.py``);
    a record of an earlier release announces none and is taken to read what all of them do."""
    backend.worker_beat(WorkerBeat(node="w1@h1", host="h1", pid=10, interval_ms=2000,
                                   reads=(formats.JSON, "z9")))
    backend.worker_beat(_beat("w2@h1", 11))
    announced, earlier = backend.worker_beats()
    assert announced.reads == (formats.JSON, "z9") and earlier.reads == ()
    assert announced.can_read("z9") and not announced.can_read(formats.Z1)
    assert all(earlier.can_read(f) for f in formats.UNANNOUNCED) and not earlier.can_read("z9")
