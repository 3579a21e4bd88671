"""The parts of a queue migration: the kombu queue it reads (:class:`Source`), the items
it moves, the lock, the tally and the pace; ``migrate.py`` runs them, ``movers.py`` moves
the items (one Lua script on the same server, or staged across servers)."""


from __future__ import annotations

import dataclasses
import hashlib
import os
import socket
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import redis

from celery_plus.model.store import Backend, NewJob
from celery_plus.queue_migration.layout import KombuLayout
from celery_plus.stores.redis.backend import RedisBackend
from celery_plus.transport.legacy import MALFORMED_SUFFIX, parse_envelope
from celery_plus.transport.publishing import job_from_message

MALFORMED_REASON = "malformed message"
MALFORMED_ERROR = "not a kombu message envelope (found in legacy queue {queue} by migrate-queue)"
LOCK_TTL_MS = 60_000


class MigrationError(Exception):
    """The migration cannot start or go on (the message says why and what to do)."""


@dataclass(frozen=True)
class MigrateOptions:
    queue: str
    batch_size: int = 500
    include_unacked: bool = False
    #: Unacked entries delivered longer ago than this (seconds) move; None: the layout's
    #: visibility timeout (when kombu itself would restore them).
    unacked_older_than: float | None = None
    #: At most this many messages per second (None: as fast as the stores go).
    rate: float | None = None
    dry_run: bool = False


@dataclass
class Tally:
    """What a migration did (or, in a dry run, would do)."""

    moved: int = 0  # stored as new durable jobs
    present: int = 0  # task id already in the store: the legacy copy is dropped
    coalesced: int = 0  # a unique key the task declared is held by another job
    malformed: int = 0  # dead-lettered with their raw bytes
    from_unacked: int = 0  # of the above, taken from kombu's unacked hash
    unacked_left: int = 0  # unacked entries of the queue left (too recent, unreadable)
    planned: int = 0  # what there was to move when the run started

    @property
    def done(self) -> int:
        return self.moved + self.present + self.coalesced + self.malformed

    def add(self, other: Sequence[int]) -> None:
        _, moved, present, coalesced, bad = other
        self.moved += moved
        self.present += present
        self.coalesced += coalesced
        self.malformed += bad


@dataclass(frozen=True)
class Item:
    """One legacy message, ready to store: ``job`` (None when ``raw`` is no envelope)."""

    raw: bytes
    job: NewJob | None
    #: Delivery tag, for an entry of the unacked hash.
    tag: str = ""


@dataclass
class Source:
    """The legacy side: a Redis client (no key prefixing: keys are built by ``layout``)."""

    client: redis.Redis
    layout: KombuLayout
    queue: str
    max_deliveries: int = 5
    worker_id: str = field(default_factory=lambda: f"migrate-queue:{socket.gethostname()}:"
                                                   f"{os.getpid()}")

    @property
    def staging(self) -> str:
        return self.layout.staging(self.queue)

    @property
    def side_queue(self) -> str:
        return self.queue + MALFORMED_SUFFIX

    def lists(self) -> list[str]:
        """Where pending messages are, in the order they move: staging, then priorities."""
        return [self.staging, *self.layout.priority_lists(self.queue)]

    def item(self, raw: bytes | str, tag: str = "") -> Item:
        """Describe a list entry (or an unacked entry's envelope) as a job of this queue."""
        return item_of(self.queue, raw, self.max_deliveries, tag)

    def bad_job(self, raw: bytes, job_id: str) -> NewJob:
        return NewJob(id=job_id, queue=self.side_queue, message=raw)  # type: ignore[arg-type]

    def unacked_items(self, older_than: float) -> tuple[list[Item], int]:
        """This queue's unacked entries delivered more than ``older_than`` s ago; and how
        many of the queue's entries stay (too recent, or unreadable)."""
        cutoff = time.time() - older_than
        index: list[tuple[bytes, float]] = cast(Any, self.client.zrange(
            self.layout.unacked_index, 0, -1, withscores=True))
        tags = [_text(tag) for tag, _ in index]
        old = {_text(tag) for tag, score in index if score <= cutoff}
        items: list[Item] = []
        left = 0
        bindings: dict[str, set[str]] = {}
        for start in range(0, len(tags), 500):
            chunk = tags[start:start + 500]
            for tag, entry in zip(chunk, self.client.hmget(self.layout.unacked, chunk),
                                  strict=True):
                if entry is None:
                    continue
                message, belongs = self._unacked_entry(entry, bindings)
                if not belongs:
                    continue
                if message is None or tag not in old:
                    left += 1
                    continue
                items.append(self.item(_json_bytes(message), tag))
        return items, left

    def unacked_count(self) -> int:
        """How many entries of kombu's unacked hash belong to this queue."""
        readable, unreadable = self.unacked_items(0)
        return len(readable) + unreadable

    def _unacked_entry(self, entry: bytes | str, bindings: dict[str, set[str]],
                       ) -> tuple[dict[str, Any] | None, bool]:
        """(envelope, belongs to this queue) of an unacked entry ([envelope, exchange, rk])."""
        from kombu.utils.json import loads

        try:
            message, exchange, routing_key = loads(_text(entry))
        except (ValueError, TypeError, UnicodeDecodeError):
            return None, False  # unreadable: its queue cannot be told, so it stays
        if not exchange:
            belongs = routing_key == self.queue
        else:
            if exchange not in bindings:
                members = list(self.client.smembers(self.layout.bindings(exchange)))
                bindings[exchange] = self.layout.binding_queues(members, routing_key)
            belongs = self.queue in bindings[exchange]
        if not isinstance(message, dict) or not isinstance(message.get("properties"), dict):
            return None, belongs
        return message, belongs


def item_of(queue: str, raw: bytes | str, max_deliveries: int, tag: str = "") -> Item:
    """Describe the envelope ``raw`` as a job of ``queue`` (``job`` None if it is none),
    its id by :func:`stable_id`."""
    raw = raw if isinstance(raw, bytes) else raw.encode()
    try:
        message = parse_envelope(raw)
    except ValueError:
        return Item(raw, None, tag)
    job = job_from_message(queue, message, max_deliveries)
    return Item(raw, dataclasses.replace(
        job, id=stable_id(message, raw), message=raw.decode()), tag)


def stable_id(message: dict[str, Any], raw: bytes) -> str:
    """The task id (Celery's ``id`` header), else one derived from the bytes: the same
    message always gets the same job id, which is what makes a re-run idempotent."""
    headers = message.get("headers") if isinstance(message.get("headers"), dict) else {}
    props = message["properties"]
    found = (headers or {}).get("id") or props.get("correlation_id")
    if found:
        return str(found)
    return "legacy-" + hashlib.sha256(raw).hexdigest()[:32]


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _json_bytes(message: dict[str, Any]) -> bytes:
    from kombu.utils.json import dumps

    return dumps(message).encode()


def existing_ids(backend: Backend, ids: Iterable[str]) -> set[str]:
    """The ids among ``ids`` that the store has a job for (any state)."""
    ids = list(ids)
    if isinstance(backend, RedisBackend):
        pipe = backend.client.pipeline(transaction=False)
        for job_id in ids:
            pipe.exists(backend.key("job", job_id))
        return {job_id for job_id, hit in zip(ids, pipe.execute(), strict=True) if hit}
    return {job_id for job_id in ids if backend.record(job_id) is not None}


class Lock:
    """One migration of a queue at a time: a key on the legacy server, renewed per batch."""

    _RENEW = "if redis.call('GET', KEYS[1]) == ARGV[1] then " \
             "return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0"
    _RELEASE = "if redis.call('GET', KEYS[1]) == ARGV[1] then " \
               "return redis.call('DEL', KEYS[1]) end return 0"
    _TAKE_OVER = "if redis.call('GET', KEYS[1]) == ARGV[1] then " \
                 "return redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3]) end return false"

    def __init__(self, client: redis.Redis, key: str) -> None:
        self.client = client
        self.key = key
        self.value = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"

    def acquire(self) -> None:
        if self.client.set(self.key, self.value, nx=True, px=LOCK_TTL_MS):
            return
        holder = _text(self.client.get(self.key) or b"")
        if holder and _dead_here(holder) and self.client.eval(
                self._TAKE_OVER, 1, self.key, holder, self.value, LOCK_TTL_MS):
            return
        ttl = max(int(self.client.pttl(self.key)), 0) / 1000
        raise MigrationError(
            f"another migrate-queue holds {self.key} ({holder or 'gone'}; it expires in "
            f"{ttl:.0f}s if that process died on another host). Wait for it to finish.")

    def renew(self) -> None:
        if not self.client.eval(self._RENEW, 1, self.key, self.value, LOCK_TTL_MS):
            raise MigrationError(f"lost the migration lock {self.key}: another migrate-queue "
                                 "took over; stopping (nothing is lost, re-run to resume)")

    def release(self) -> None:
        self.client.eval(self._RELEASE, 1, self.key, self.value)


def _dead_here(holder: str) -> bool:
    """True if ``holder`` (host:pid:nonce) names a process of this host that is gone."""
    host, _, rest = holder.partition(":")
    pid = rest.partition(":")[0]
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


Progress = Callable[[str, Tally], None]


class _Pace:
    """Keeps a run under ``rate`` messages per second (sleeps between batches)."""

    def __init__(self, rate: float | None) -> None:
        self.rate = rate
        self.started = time.monotonic()
        self.count = 0

    def took(self, n: int) -> None:
        self.count += n
        if self.rate:
            delay = self.started + self.count / self.rate - time.monotonic()
            if delay > 0:
                time.sleep(delay)
