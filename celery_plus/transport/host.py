"""What the channel, the legacy bridge and the event loop need of their transport.

``Transport`` (``__init__.py``) creates each of them and hands itself over; they name it by
this protocol, not by its class, so no module of the package imports the package's
``__init__`` back, not even for a type hint.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from celery_plus.leases.holdings import Holdings
    from celery_plus.model.store import Backend
    from celery_plus.settings import PlusConfig
    from celery_plus.transport.legacy import LegacyQueues
    from celery_plus.transport.transient import TransientQueues


class Host(Protocol):
    """The ``plus`` kombu transport, as its channels and helpers use it."""

    @property
    def config(self) -> PlusConfig:
        """The resolved ``plus_*`` settings."""

    @property
    def worker_id(self) -> str:
        """This process's identity in the store (claims, leases, bindings)."""

    @property
    def holdings(self) -> Holdings:
        """What this process holds in the store (``leases/holdings.py``)."""

    @property
    def legacy(self) -> LegacyQueues | None:
        """The queues left in kombu's Redis layout (a mixed deployment), if any."""

    @property
    def transient(self) -> TransientQueues:
        """Which queues are transient."""

    @property
    def backend(self) -> Backend:
        """The store, as the calling OS thread must use it."""

    @property
    def state(self) -> Any:
        """kombu's broker state (exchanges, bindings)."""

    @property
    def connection_errors(self) -> Any:
        """The errors kombu and Celery retry as a lost connection."""

    @property
    def _callbacks(self) -> dict[str, Any]:
        """kombu's consumer callbacks, by queue."""

    def new_backend(self) -> Backend:
        """Another backend on the transport's store (its own connection)."""

    def start_keeper(self) -> None:
        """Have the lease keeper renew this process's claims."""

    def note_next_due(self, seconds: float | None) -> None:
        """Remember when the next scheduled job is due."""

    def _deliver(self, message: Any, queue: str) -> None:
        """Hand ``message`` to the consumer of ``queue`` (kombu's virtual transport)."""

    def _drain_ready(self, transient_watched: bool = False) -> int:
        """Deliver what every channel has ready; the number delivered (transient queues
        not popped while ``transient_watched``: a store wait in flight watches them)."""

    def _wait_plan(self, wait: float) -> tuple[list[str], list[str], float, bool]:
        """What the next store wait watches, and for how long."""

    def _live_channels(self) -> list[Any]:
        """The channels not closed yet."""
