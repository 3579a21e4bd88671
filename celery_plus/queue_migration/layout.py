"""Where kombu's Redis transport keeps a plain Celery deployment's queues.

Key schema (G = kombu's ``global_keyprefix``, default ""; names as kombu 5.7 writes them):
  G{queue}                       LIST  pending messages of priority step 0 (LPUSH in, consumers
                                       pop the tail: the tail is the oldest)
  G{queue}\\x06\\x16{step}         LIST  the same for each other ``priority_steps`` value (3, 6, 9);
                                       consumers drain the steps in order, 0 first
  G{unacked_key}                 HASH  delivery tag -> JSON [envelope, exchange, routing key] of
                                       every message a consumer holds (ack emulation)
  G{unacked_index_key}           ZSET  delivery tag -> delivery time (seconds, client clock)
  G_kombu.binding.{exchange}     SET   "routing key\\x06\\x16pattern\\x06\\x16queue" per binding
celery-plus adds, for ``celery-plus migrate-queue`` only:
  G_celery_plus.migrate.staging.{queue}  LIST  messages taken off the queue, not yet confirmed in
                                                a durable store on another server
  G_celery_plus.migrate.lock.{queue}     STRING the migrating process (host:pid:nonce), PX

Every value comes from the same transport options plain Celery used
(``broker_transport_options``), so both sides read one layout.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kombu.transport.redis import PRIORITY_STEPS, Channel

DEFAULT_VISIBILITY_TIMEOUT = float(Channel.visibility_timeout)


@dataclass(frozen=True)
class KombuLayout:
    """kombu's Redis key layout for one deployment (its transport options)."""

    global_keyprefix: str = ""
    sep: str = Channel.sep
    priority_steps: tuple[int, ...] = tuple(PRIORITY_STEPS)
    unacked_key: str = Channel.unacked_key
    unacked_index_key: str = Channel.unacked_index_key
    visibility_timeout: float = DEFAULT_VISIBILITY_TIMEOUT

    @classmethod
    def from_options(cls, options: Mapping[str, Any] | None,
                     global_keyprefix: str | None = None) -> KombuLayout:
        """The layout ``broker_transport_options`` describe (``global_keyprefix`` overrides)."""
        options = options or {}
        steps = options.get("priority_steps") or PRIORITY_STEPS
        return cls(
            global_keyprefix=str(options.get("global_keyprefix") or "")
            if global_keyprefix is None else global_keyprefix,
            sep=str(options.get("sep") or Channel.sep),
            priority_steps=tuple(dict.fromkeys(int(s) for s in steps)),
            unacked_key=str(options.get("unacked_key") or Channel.unacked_key),
            unacked_index_key=str(options.get("unacked_index_key")
                                  or Channel.unacked_index_key),
            visibility_timeout=float(options.get("visibility_timeout")
                                     or DEFAULT_VISIBILITY_TIMEOUT),
        )

    def key(self, name: str) -> str:
        return self.global_keyprefix + name

    def priority_lists(self, queue: str) -> list[str]:
        """The queue's lists (full keys) in kombu's delivery order: priority step 0 first."""
        return [self.key(f"{queue}{self.sep}{step}" if step else queue)
                for step in self.priority_steps]

    @property
    def unacked(self) -> str:
        return self.key(self.unacked_key)

    @property
    def unacked_index(self) -> str:
        return self.key(self.unacked_index_key)

    def bindings(self, exchange: str) -> str:
        return self.key(f"_kombu.binding.{exchange}")

    def staging(self, queue: str) -> str:
        return self.key(f"_celery_plus.migrate.staging.{queue}")

    def lock(self, queue: str) -> str:
        return self.key(f"_celery_plus.migrate.lock.{queue}")

    def binding_queues(self, members: list[bytes | str], routing_key: str) -> set[str]:
        """Queues a direct exchange with these binding members routes ``routing_key`` to."""
        queues: set[str] = set()
        for member in members:
            text = member.decode() if isinstance(member, bytes) else member
            parts = text.split(self.sep)
            if len(parts) == 3 and parts[0] == routing_key:
                queues.add(parts[2])
        return queues
