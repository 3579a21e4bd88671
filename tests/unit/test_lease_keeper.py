"""When a lease keeper renews first: the coordination keeper at once (it is restarted on every
broker reconnect while tasks keep their claims), on the in-process reference store."""

from __future__ import annotations

import time
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

from celery_plus.coordination.keeper import CoordinationKeeper
from celery_plus.stores.memory import MemoryBackend
from celery_plus.transport.backend import NewJob, Verdict
from tests.support import wait_until

INTERVAL_S = 10.0


class RecordingStore(MemoryBackend):
    """The reference store, noting when each heartbeat reaches it."""

    def __init__(self) -> None:
        super().__init__()
        self.beats: list[float] = []

    def heartbeat(self, held: Sequence[tuple[str, int]]) -> list[Verdict]:
        self.beats.append(time.monotonic())
        return super().heartbeat(held)


class HoldingCoordinator:
    """What the keeper asks of a coordinator, holding one claim of a real store."""

    def __init__(self) -> None:
        self.backend = RecordingStore()
        self.backend.publish(NewJob(id="job", queue="q", message="{}"))
        claim = self.backend.claim(["q"], "w1", 1).claims[0]
        self.claims = [(claim.job_id, claim.token)]
        self.worker_id = "w1"
        self.config = SimpleNamespace(heartbeat_interval=INTERVAL_S, maintenance_interval=60.0)
        self.renewals: list[list[tuple[str, int]]] = []

    def held(self) -> list[tuple[str, int]]:
        return list(self.claims)

    def renewed(self, held: list[tuple[str, int]], asked_at: float) -> None:
        self.renewals.append(held)

    def forget(self, lost: Any) -> None:
        self.claims = [c for c in self.claims if c[0] not in lost]

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
