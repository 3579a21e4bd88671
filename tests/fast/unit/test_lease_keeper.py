"""When a lease keeper renews first: the coordination keeper at once (it is restarted on every
broker reconnect while tasks keep their claims), on the in-process reference store."""

from __future__ import annotations

import time
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import pytest

from celery_plus import signals
from celery_plus.coordination.keeper import CoordinationKeeper
from celery_plus.leases.holdings import Ends, Holdings
from celery_plus.leases.keeper import clock
from celery_plus.model.store import NewJob, Verdict
from celery_plus.stores.memory import MemoryBackend
from tests.support import wait_until

INTERVAL_S = 10.0


class RecordingStore(MemoryBackend):
    """The reference store, noting when each heartbeat reaches it."""

    def __init__(self) -> None:
        super().__init__()
        self.beats: list[float] = []

    def heartbeat(self, held: Sequence[tuple[str, int]],
                  starts: Sequence[int | None] | None = None) -> list[Verdict]:
        self.beats.append(time.monotonic())
        return super().heartbeat(held, starts)


class RecordingHoldings(Holdings):
    """The leases' ledger, noting which claims each heartbeat's answer renewed."""

    def __init__(self) -> None:
        super().__init__(lease_s=60.0)
        self.renewals: list[list[tuple[str, int]]] = []

    def confirmed(self, pairs: Sequence[tuple[str, int]], verdicts: Sequence[Verdict],
                  asked_at: float) -> Ends:
        self.renewals.append([p for p, v in zip(pairs, verdicts, strict=True)
                              if v == Verdict.RENEWED])
        return super().confirmed(pairs, verdicts, asked_at)


class HoldingCoordinator:
    """What the keeper asks of a coordinator, holding one claim of a real store."""

    def __init__(self) -> None:
        self.backend = RecordingStore()
        self.backend.publish(NewJob(id="job", queue="q", message="{}"))
        claim = self.backend.claim(["q"], "w1", 1).claims[0]
        self.holdings = RecordingHoldings()
        self.holdings.hold(claim.job_id, claim.token, clock())
        self.worker_id = "w1"
        self.config = SimpleNamespace(heartbeat_interval=INTERVAL_S, maintenance_interval=60.0)

    @property
    def claims(self) -> list[tuple[str, int]]:
        """The claims still renewed."""
        return self.holdings.renewable()

    @property
    def renewals(self) -> list[list[tuple[str, int]]]:
        return self.holdings.renewals

    def retry_unsettled(self) -> None:
        pass

    def report_dead_letters(self, dead: Any) -> None:
        pass


def test_a_restarted_coordination_keeper_renews_held_claims_at_once() -> None:
    coordinator = HoldingCoordinator()
    keeper = CoordinationKeeper(coordinator)  # type: ignore[arg-type]
    started = time.monotonic()
    keeper.start()
    try:
        wait_until(lambda: coordinator.renewals, timeout=INTERVAL_S / 2,
                   message="the first heartbeat, well before one interval")
    finally:
        keeper.stop()
        keeper.join(5)
    assert coordinator.renewals[0] == [("job", coordinator.claims[0][1])]
    assert coordinator.backend.beats[0] - started < INTERVAL_S / 2


def test_the_coordination_keeper_forgets_ended_claims_and_announces_only_lost_ones() -> None:
    coordinator = HoldingCoordinator()
    store = coordinator.backend
    store.publish(NewJob(id="other", queue="q", message="{}"))
    other = store.claim(["q"], "w2", 1).claims[0]
    # "job" continued by its own run (a retry); a claim of "other" whose token is not current.
    store.publish(NewJob(id="job", queue="q", message="{}", lease_token=coordinator.claims[0][1]))
    coordinator.holdings.hold("other", other.token + 100, clock())
    announced: list[str] = []

    def lost(sender: object = None, task_id: str = "", **_: object) -> None:
        announced.append(task_id)

    signals.task_lease_lost.connect(lost, weak=False)
    try:
        CoordinationKeeper(coordinator).heartbeat(store)  # type: ignore[arg-type]
    finally:
        signals.task_lease_lost.disconnect(lost)
    assert announced == ["other"]
    assert coordinator.claims == [] and coordinator.renewals == [[]]


def test_the_coordination_keeper_carries_start_marks_and_writes_the_worker_record(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Coordinated mode (issue #28): the claims' start marks ride on its heartbeats, as the
    transport keeper's do (reserved until the task starts, then started when it did), and
    its turns write the worker's record (the admin's workers page)."""
    from celery_plus.coordination import keeper as coordination_keeper
    from celery_plus.leases import keeper as leases_keeper
    from celery_plus.leases.tokens import delivery_tag

    monkeypatch.setattr(coordination_keeper, "worker_running", lambda: True)
    monkeypatch.setattr(leases_keeper, "worker_node", lambda: ("w1@host", ("q",)))
    coordinator = HoldingCoordinator()
    store, [(job_id, token)] = coordinator.backend, coordinator.claims
    keeper = CoordinationKeeper(coordinator)  # type: ignore[arg-type]
    claimed_at = store.record(job_id).started_ms  # type: ignore[union-attr]
    keeper.heartbeat(store)
    assert store.record(job_id).reserved  # type: ignore[union-attr]  # claimed, not started
    time.sleep(0.05)
    coordinator.holdings.started(delivery_tag(job_id, token), clock() - 0.02)
    keeper.heartbeat(store)
    rec = store.record(job_id)
    assert rec is not None and not rec.reserved and rec.started_ms > claimed_at
    keeper.each_turn(store)
    [beat] = store.worker_beats()
    assert (beat.node, beat.queues) == ("w1@host", ("q",))
