"""Conformance: pausing and resuming a queue (docs/admin.md, "Pausing a queue").

Rules: ``queue_pause`` is one atomic step that returns the store's time of it; from then on no
claim, by any backend on the store, hands out a job of the paused queue (other queues are
claimed as before); publishes to it are stored and wait; a claim made before the pause runs
on and settles as usual; ``wait`` does not wake for a paused queue. Resuming makes its jobs
claimable at once, in their order, and wakes a waiting consumer. Pausing twice keeps the first
pause's time; resuming a queue that is not paused changes nothing.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from celery_plus.model.store import Backend, Settle

from .support import Q, claim, ids, publish, record, wait_until

OTHER = "other"


@pytest.mark.cluster_smoke
def test_a_paused_queue_hands_out_nothing_until_it_is_resumed(
        make_backend: Callable[..., Backend]) -> None:
    operator, worker = make_backend(), make_backend()
    for job_id in ("a", "b"):
        publish(worker, job_id)
    publish(worker, "c", queue=OTHER)
    before = operator.now_ms()
    acked = operator.queue_pause(Q, True)
    assert before <= acked <= operator.now_ms()
    assert worker.paused_queues() == {Q: acked}
    assert ids(claim(worker, queues=(Q, OTHER))) == ["c"]
    assert publish(worker, "d").accepted  # accepted, and it waits
    assert [record(worker, j).state for j in "abd"] == ["enqueued"] * 3
    assert ids(claim(make_backend(), worker="w2")) == []
    assert operator.queue_pause(Q, True) >= acked  # again: nothing changes
    assert operator.paused_queues() == {Q: acked}
    operator.queue_pause(Q, False)
    assert operator.paused_queues() == {}
    assert ids(claim(worker)) == ["a", "b", "d"]
    operator.queue_pause(Q, False)  # not paused: nothing changes
    assert operator.paused_queues() == {}


def test_a_claim_made_before_the_pause_runs_on_and_settles(backend: Backend) -> None:
    publish(backend, "a")
    publish(backend, "b")
    (held,) = claim(backend, max_jobs=1).claims
    backend.queue_pause(Q, True)
    assert [str(v) for v in backend.heartbeat([(held.job_id, held.token)])] == ["renewed"]
    assert backend.settle([Settle(held.job_id, held.token, "ack")]) == []
    assert record(backend, "a").state == "completed"
    assert record(backend, "b").state == "enqueued"
    assert backend.size(Q) == 1


def test_a_due_job_of_a_paused_queue_waits_for_the_resume(backend: Backend) -> None:
    eta = backend.now_ms() + 100
    publish(backend, "later", eta_ms=eta)
    backend.queue_pause(Q, True)
    wait_until(lambda: backend.now_ms() > eta, timeout=5, message="the ETA passes (paused)")
    assert ids(claim(backend)) == []
    assert record(backend, "later").state in ("scheduled", "enqueued")
    backend.queue_pause(Q, False)
    assert ids(claim(backend)) == ["later"]


def test_wait_does_not_wake_for_a_paused_queue_and_the_resume_wakes_it(
        make_backend: Callable[..., Backend]) -> None:
    operator, waiter = make_backend(), make_backend()
    operator.queue_pause(Q, True)
    publish(operator, "a")
    started = time.monotonic()
    assert waiter.wait([Q], [], 0.3) is None
    assert time.monotonic() - started >= 0.25
    woken: list[object] = []
    thread = threading.Thread(target=lambda: woken.append(waiter.wait([Q], [], 20)))
    thread.start()
    time.sleep(0.1)  # the waiter blocks (a wake-up before it blocks is found all the same)
    resumed = time.monotonic()
    operator.queue_pause(Q, False)
    thread.join(25)
    assert woken == [("wake", Q, None)]
    assert time.monotonic() - resumed < 5
    assert ids(claim(waiter)) == ["a"]
