"""The options every store takes, built once from the app's settings (:meth:`StoreOptions.of`).

Store-specific options (PostgreSQL's schema, Redis's connector, ...) stay parameters of
their own backend.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from celery_plus.settings import PlusConfig

#: How long and how many finished records are kept: completed (ms, count), then dead-lettered
#: (ms, count).
Retention = tuple[int, int, int, int]


@dataclass(frozen=True)
class StoreOptions:
    """How a backend times and bounds its store's work."""

    #: Key prefix of a Redis store (one prefix is one deployment); the SQL stores ignore it.
    prefix: str = "plus"
    #: How long a claim lasts without a heartbeat (``plus_visibility_timeout``).
    lease_ms: int = 30_000
    #: How long a unique hold outlives its job's due time (``plus_unique_backstop``).
    backstop_ms: int = 86_400_000
    #: Fewest waiting jobs a claim looks at (it looks at 4 per job wanted when more).
    scan_limit: int = 64
    retention: Retention = (86_400_000, 100_000, 604_800_000, 100_000)
    #: Least time between two maintenance passes of one store.
    maintenance_interval_ms: int = 1000
    #: Redis: a job's envelope in its own key next to a small hash
    #: (``plus_redis_compact_records``; False: in the hash, as releases before it read it).
    compact_records: bool = True
    #: Redis, compact layout: the envelope deflated (``plus_redis_deflate``).
    deflate: bool = True
    #: Redis Cluster: replicas that must have a publish before it is acknowledged (WAIT).
    wait_replicas: int = 0
    wait_timeout_ms: int = 1000

    @classmethod
    def of(cls, config: PlusConfig) -> StoreOptions:
        """The options the app's durable-transport settings ask for."""
        return cls(
            prefix=config.key_prefix,
            lease_ms=int(config.visibility_timeout * 1000),
            backstop_ms=int(config.unique_backstop * 1000),
            retention=(
                int(config.completed_retention * 1000), config.completed_max,
                int(config.dead_letter_retention * 1000), config.dead_letter_max,
            ),
            maintenance_interval_ms=int(config.maintenance_interval * 1000),
            compact_records=config.redis_compact_records,
            deflate=config.redis_deflate,
            wait_replicas=config.redis_wait_replicas,
            wait_timeout_ms=int(config.redis_wait_timeout * 1000),
        )


#: The options of a backend made without any.
DEFAULT_OPTIONS = StoreOptions()


class OptionsView:
    """Base of the backends: their :class:`StoreOptions`, read as attributes."""

    options: StoreOptions = DEFAULT_OPTIONS
    #: Maintenance renews the holds of waiting jobs (False for a coordination store, whose
    #: waiting records wait for another broker: see docs/coordination.md).
    renews_waiting_holds: bool = True

    @property
    def prefix(self) -> str:
        return self.options.prefix

    @property
    def lease_ms(self) -> int:
        return self.options.lease_ms

    @property
    def backstop_ms(self) -> int:
        return self.options.backstop_ms

    @property
    def scan_limit(self) -> int:
        return self.options.scan_limit

    @property
    def retention(self) -> Retention:
        return self.options.retention

    @property
    def maintenance_interval_ms(self) -> int:
        return self.options.maintenance_interval_ms
