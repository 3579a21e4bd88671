"""The coordination store's lease keeper: one per worker, started by the consumer's ``Gate``.

A :class:`~celery_plus.leases.keeper.LeaseKeeper` (renewal every ``plus_heartbeat_interval``,
lost leases, the store's throttled maintenance and lease recovery, which frees a dead
worker's slots) over the claims a :class:`~celery_plus.coordination.coordinator.Coordinator`
holds (its ``holdings``, the leases' one ledger: fed the heartbeat's verdicts as the
transport's keeper feeds its own, ``leases/process_keeper.py``); after each heartbeat it also
sends again the settles a store error kept back. Its heartbeats carry the claims' start marks
and its turns write the worker's record, as the transport's keeper does (docs/admin.md
"Reserved and running", "Workers").
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from celery_plus.leases.keeper import LeaseKeeper, clock
from celery_plus.leases.process_keeper import report_lost
from celery_plus.runtime.worker_state import worker_running

if TYPE_CHECKING:
    from celery_plus.coordination.coordinator import Coordinator
    from celery_plus.model.store import JobStore, Verdict


class CoordinationKeeper(LeaseKeeper):
    """Renews one coordinator's claims; runs the store's maintenance and lease recovery."""

    label = "celery-plus coordination keeper"
    #: Celery's consumer stops and starts the gate on every broker reconnect while tasks keep
    #: running with their claims: the restarted keeper renews them at once.
    first_heartbeat_now = True

    def __init__(self, coordinator: Coordinator) -> None:
        super().__init__("celery-plus-coordination-keeper", coordinator.config,
                         coordinator.worker_id)
        self.coordinator = coordinator

    def store(self) -> JobStore:
        return self.coordinator.backend

    def held(self) -> Sequence[tuple[str, int]]:
        return self.coordinator.holdings.renewable()

    def renewed(self, held: Sequence[tuple[str, int]], verdicts: Sequence[Verdict],
                asked_at: float) -> None:
        """Renewed claims are confirmed; the others are over (never renewed again, their
        settles suspect), and the lost ones announced and their runs still going on here
        stopped, as the transport's keeper does (not those their own run ended: acked, or
        continued). The lease watch stops a run before its lease can lapse; this covers a
        worker that learns of the loss first (frozen, then thawed)."""
        ends = self.coordinator.holdings.confirmed(held, verdicts, asked_at)
        report_lost(ends.lost)

    def heartbeat(self, backend: JobStore) -> None:
        super().heartbeat(backend)
        self.coordinator.retry_unsettled()

    def start_marks(self, held: Sequence[tuple[str, int]]) -> Sequence[int | None] | None:
        """Each claim's start (its request's ``on_accepted``: ``Claimed.started``) or, in a
        Celery worker, not started yet: claimed as the delivery went to the pool, waiting
        there (reserved); None when no mark is known (not a worker, no start noted)."""
        marks = self.coordinator.holdings.start_marks(held, clock(), {}, worker_running())
        return marks if any(mark is not None for mark in marks) else None

    def each_turn(self, backend: JobStore) -> None:
        self._step(self.beat_worker, backend)

    def report_dead_letters(self, dead: list[tuple[str, str]]) -> None:
        self.coordinator.report_dead_letters(dead)
