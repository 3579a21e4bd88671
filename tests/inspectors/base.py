"""What every store's inspector answers (``tests/inspectors/*.py``)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from celery_plus.model.job_record import JobRecord


class Inspector(ABC):
    """Test read-outs of one backend's store (nothing here changes it but ``force_state``)."""

    def __init__(self, backend: Any) -> None:
        self.backend = backend

    @abstractmethod
    def job(self, job_id: str) -> dict[str, str] | None:
        """The job record as text fields named as the Redis job hash (``lua/lib.lua``),
        absent fields left out; None without a record."""

    def record(self, job_id: str) -> JobRecord | None:
        """The job record as the store answers it (``Backend.record``)."""
        return self.backend.record(job_id)  # type: ignore[no-any-return]

    def raw_message(self, job_id: str) -> bytes | None:
        """The job's stored message, byte for byte (``Backend.raw_message``)."""
        return self.backend.raw_message(job_id)  # type: ignore[no-any-return]

    def stats(self) -> dict[str, int]:
        """The store's counters (``Backend.stats``)."""
        return self.backend.stats()  # type: ignore[no-any-return]

    @abstractmethod
    def holder(self, lock: str) -> str | None:
        """The task id holding unique ``lock`` (None when free or expired)."""

    @abstractmethod
    def holds(self) -> dict[str, str]:
        """Every live unique hold: lock -> holder task id."""

    @abstractmethod
    def hold_deadline(self, lock: str) -> int | None:
        """When unique ``lock`` lapses (ms since the epoch; None when free or expired)."""

    @abstractmethod
    def slot_holders(self, group: str) -> set[str]:
        """Job ids holding a slot of concurrency ``group``."""

    @abstractmethod
    def ids_in_state(self, state: str, limit: int = 1000) -> list[str]:
        """Ids of jobs in ``state``, in the order of the Redis store's index of that state."""

    @abstractmethod
    def lease_deadline(self, job_id: str) -> int | None:
        """The stored lease deadline (ms since the epoch) of a running job."""

    @abstractmethod
    def transient_deadline(self, queue: str) -> int | None:
        """When transient ``queue``'s messages expire (ms since the epoch; None when empty)."""

    @abstractmethod
    def blocked_groups(self) -> set[str]:
        """Concurrency groups the store lists as having blocked jobs."""

    @abstractmethod
    def force_state(self, job_id: str, state: str) -> None:
        """Overwrite a job's state and nothing else: no index, slot, hold or lease is
        touched, so the store is left inconsistent on purpose (e.g. a slot held by a job that
        is no longer running, for the maintenance sweep to repair)."""
