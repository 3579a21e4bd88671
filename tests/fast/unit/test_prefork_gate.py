"""The prefork gate's pure logic: the non-blocking slot semaphore and when it is installed.

End to end (a busy prefork worker answering remote control, a revoked waiting task skipped):
``tests/deploy/e2e/test_remote_control.py``.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace
from typing import Any

import kombu.transport.redis
from celery.concurrency.prefork import TaskPool as Prefork
from celery.concurrency.solo import TaskPool as Solo

from celery_plus.transport import Transport
from celery_plus.worker.prefork_gate import SlotGate, _on_worker_init


def test_a_free_slot_runs_the_callback_at_once_a_full_gate_queues_it() -> None:
    gate, ran = SlotGate(2), []
    assert gate.acquire(ran.append, "a") and gate.acquire(ran.append, "b")
    assert not gate.acquire(ran.append, "c")
    assert not gate.acquire(ran.append, "d")
    assert ran == ["a", "b"] and gate.value == 0
    gate.release()
    assert ran == ["a", "b", "c"]
    gate.release()
    gate.release()
    gate.release()
    assert ran == ["a", "b", "c", "d"]
    assert gate.value == 2, "released more than acquired: the value stays at its initial one"


def test_a_callback_that_releases_again_is_served_by_a_loop_not_recursion() -> None:
    gate, ran = SlotGate(1), []
    gate.acquire(ran.append, "running")

    def revoked(n: int) -> None:  # Celery frees the slot of a revoked request at once
        ran.append(n)
        gate.release()

    for n in range(5000):
        gate.acquire(revoked, n)
    gate.release()
    assert ran == ["running", *range(5000)]
    assert gate.value == 1


def test_a_failing_callback_passes_its_slot_on() -> None:
    gate, ran = SlotGate(1), []
    gate.acquire(ran.append, "running")

    def broken() -> None:
        raise RuntimeError("boom")

    gate.acquire(broken)
    gate.acquire(ran.append, "next")
    gate.release()
    assert ran == ["running", "next"]


def test_clear_drops_waiters_and_grow_serves_them() -> None:
    gate, ran = SlotGate(1), []
    gate.acquire(ran.append, 1)
    gate.acquire(ran.append, 2)
    gate.clear()
    gate.release()
    assert ran == [1] and gate.value == 1
    gate.acquire(ran.append, 3)
    gate.acquire(ran.append, 4)
    gate.grow()
    assert ran == [1, 3, 4] and gate.initial_value == 2
    gate.shrink()
    assert gate.initial_value == 1


def test_acquire_and_release_from_many_threads_lose_nothing() -> None:
    gate, lock, ran = SlotGate(3), threading.Lock(), []

    def done(n: int) -> None:
        with lock:
            ran.append(n)

    def submit(start: int) -> None:
        for n in range(start, start + 500):
            gate.acquire(done, n)

    def finish() -> None:
        for _ in range(1000):
            gate.release()

    threads = [threading.Thread(target=submit, args=(i * 500,)) for i in range(4)]
    threads += [threading.Thread(target=finish) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    while len(ran) < 2000:
        gate.release()
    assert sorted(ran) == list(range(2000))


def worker(transport: type, pool: Any = "prefork", eventloop: bool = False,
           putlocks: bool = True) -> Any:
    conninfo = SimpleNamespace(get_transport_cls=lambda: transport)
    return SimpleNamespace(use_eventloop=eventloop, pool_putlocks=putlocks, pool_cls=pool,
                           _conninfo=conninfo, _process_task_sem=object())


def test_a_prefork_worker_on_the_plus_transport_gets_the_gated_pool() -> None:
    w = worker(Transport)
    _on_worker_init(sender=w)
    assert issubclass(w.pool_cls, Prefork) and w.pool_cls is not Prefork
    assert f"{w.pool_cls.__module__}:{w.pool_cls.__qualname__}" == \
        "celery.concurrency.prefork:TaskPool", "Celery maps the class path back to 'prefork'"


def test_other_workers_are_left_as_celery_makes_them() -> None:
    for w in (worker(kombu.transport.redis.Transport), worker(Transport, pool=Solo),
              worker(Transport, pool="threads"), worker(Transport, eventloop=True),
              worker(Transport, putlocks=False)):
        before = w.pool_cls
        _on_worker_init(sender=w)
        assert w.pool_cls is before
