"""The durable store on a Redis Cluster (``plus+redis+cluster://``): one
:class:`~.backend.RedisBackend` per key scope, all on one cluster client.

Each queue is a scope of its own (``plus:{q:<queue>}:…``, ``keyspace.py``): every script runs
on one queue's slot, so a queue lives on one primary and the queues spread over the
cluster's primaries. Operations of one queue go to its scope; operations named by job id
find the job's queue (remembered from the publish or claim, else looked up over the queue
registry); store-wide operations (recovery, maintenance, inspection) fan out over the
registry. Beat's leader, schedule entries and transient queues live in the global scope.

What this changes (docs/redis-cluster.md): unique holds, concurrency slots and cluster rate
limits are per queue (``validate_queue_scope`` makes tasks say so), and a periodic tick is
recorded, then published, in two steps.
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

import redis
from redis.cluster import RedisCluster
from redis.exceptions import RedisClusterException

from celery_plus.exceptions import QueueScopeError
from celery_plus.model.options import DEFAULT_OPTIONS, OptionsView, StoreOptions
from celery_plus.model.store import (
    Backend,
    ClaimResult,
    JobClaim,
    JobRecord,
    NewJob,
    PublishOutcome,
    RateUsage,
    Recovered,
    ScheduledJob,
    ScheduleRecord,
    Settle,
    Verdict,
    WorkerBeat,
)
from celery_plus.settings import PlusConfig
from celery_plus.stores.redis.backend import RedisBackend, _text
from celery_plus.stores.redis.connect import RedisConnect, from_kombu
from celery_plus.stores.redis.keyspace import GLOBAL, exchange_scope, queue_scope, scoped_prefix

#: Longest single blocking pop while a wait spans several slots (each slot polled in turn).
WAIT_SLICE_S = 0.05
#: Job ids whose queue is remembered (a bigger map is dropped and rebuilt from lookups).
QUEUE_MEMORY = 100_000


class NotDurable(redis.exceptions.RedisError):
    """A publish the required replicas did not confirm in time (it may be lost in a failover)."""


class RedisClusterBackend(OptionsView, Backend):
    """Store operations on a Redis Cluster, scoped per queue."""

    @classmethod
    def from_url(cls, url: str, config: PlusConfig,
                 connection: Any = None) -> RedisClusterBackend:
        """The cluster at ``url`` (``redis+cluster://``), connected as the broker's kombu
        ``connection`` says."""
        return cls(url, StoreOptions.of(config), connector=from_kombu(url, connection))


    def __init__(self, url: str, options: StoreOptions = DEFAULT_OPTIONS, *,
                 connector: RedisConnect | None = None) -> None:
        self.url = url
        self.options = options
        self.connector = connector or RedisConnect(url)
        self._scopes: dict[str, RedisBackend] = {}
        self._registered: set[str] = set()
        self._queue_of_job: dict[str, str] = {}
        #: When this process writes its queues to the registry again (``maintain``).
        self._registered_again_at = 0.0
        self._lock = threading.RLock()

    @functools.cached_property
    def client(self) -> RedisCluster:
        """The cluster client, made on first use: redis-py's reads the slot map from the seed
        nodes when made, and a transport must be creatable while the store is down."""
        with self._lock:
            return self.connector.cluster_client()

    @functools.cached_property
    def store(self) -> RedisBackend:
        """The global scope: beat's lease, schedule entries, the queue registry, transient
        queues."""
        return self._scope(GLOBAL)

    @functools.cached_property
    def _registry(self) -> str:
        return self.store.key("queues")

    # -- scopes -------------------------------------------------------------------------
    def _scope(self, scope: str) -> RedisBackend:
        # The worker records are the global scope's: every scope's publishes ask its readers.
        readers, records = (None, None) if scope == GLOBAL \
            else (self.store.readers, self.store)
        with self._lock:
            backend = self._scopes.get(scope)
            if backend is None:
                prefixed = StoreOptions(**{**vars(self.options),
                                           "prefix": scoped_prefix(self.prefix, scope)})
                backend = self._scopes[scope] = RedisBackend(
                    self.url, prefixed, connector=self.connector, client=self.client,
                    readers=readers, records=records)
            return backend

    def queue(self, name: str) -> RedisBackend:
        """The scope of queue ``name`` (registered in the store's queue registry once)."""
        if name not in self._registered:
            self.client.sadd(self._registry, name)
            self._registered.add(name)
        return self._scope(queue_scope(name))

    def queues(self) -> list[str]:
        """Every queue that ever had a job or a consumer (the registry), sorted."""
        return sorted({_text(q) for q in self.client.smembers(self._registry)} | self._registered)

    def _all(self) -> list[RedisBackend]:
        return [self.queue(q) for q in self.queues()]

    def _remember(self, job_id: str, queue: str) -> None:
        if len(self._queue_of_job) >= QUEUE_MEMORY:
            self._queue_of_job.clear()
        self._queue_of_job[job_id] = queue

    def queue_of(self, job_id: str) -> str | None:
        """The queue whose scope holds job ``job_id``'s record (None: no record)."""
        known = self._queue_of_job.get(job_id)
        if known is not None:
            return known
        names = self.queues()
        pipe = self.client.pipeline(transaction=False)
        for name in names:
            pipe.exists(self.queue(name).key("job", job_id))
        for name, found in zip(names, pipe.execute(), strict=True):
            if found:
                self._remember(job_id, name)
                return name
        return None

    def _job_scope(self, job_id: str) -> RedisBackend | None:
        name = self.queue_of(job_id)
        return None if name is None else self.queue(name)

    def _by_queue(self, items: Iterable[Any], job_id: Any) -> dict[str | None, list[Any]]:
        grouped: dict[str | None, list[Any]] = defaultdict(list)
        for item in items:
            grouped[self.queue_of(job_id(item))].append(item)
        return grouped

    # -- connection ---------------------------------------------------------------------
    def connect(self) -> None:
        try:
            self.client.ping()
        except RedisClusterException as exc:  # no seed node answered
            raise redis.exceptions.ConnectionError(str(exc)) from exc

    def close(self) -> None:
        if "client" in self.__dict__:
            self.client.close()

    def now_ms(self) -> int:
        return self.store.now_ms()

    # -- publishing -----------------------------------------------------------------------
    def _check_continuation(self, job: NewJob) -> None:
        """Refuse a continuation (retry / ``Task.replace`` of a running delivery) to a queue
        other than the one holding the job: its record, lease and token live in that queue's
        slot, so the other queue's scope would fence it (nothing stored, the retry lost once
        the delivery is acked) or, without a token, hold a second record of the id."""
        if not job.lease_token or self._queue_of_job.get(job.id) == job.queue:
            return
        if self.client.exists(self.queue(job.queue).key("job", job.id)):
            return  # the record is in the target queue (this process had not seen it)
        home = self.queue_of(job.id)
        if home is not None and home != job.queue:
            raise QueueScopeError(
                f"Job {job.id!r} runs in queue {home!r}; its retry / replace was sent to queue "
                f"{job.queue!r}. A Redis Cluster store keeps a job in its queue's slot, so a "
                f"continuation cannot move it: retry to the same queue, or publish a new job "
                f"(another id) to {job.queue!r} (docs/redis-cluster.md).")

    def publish(self, job: NewJob) -> PublishOutcome:
        self._check_continuation(job)
        scope = self.queue(job.queue)
        args = scope._publish_args(job)
        if self.options.wait_replicas <= 0:
            reply = scope.scripts.run("publish", args)
        else:
            reply = self._publish_durably(scope, args)
        self._remember(job.id, job.queue)
        return scope._outcome(job, reply)

    def _publish_durably(self, scope: RedisBackend, args: list[Any]) -> Any:
        """The publish, then ``WAIT`` on the same connection of the queue's primary."""
        node = self.client.get_node_from_key(scope.key("q", ""))
        pipe = self.client.get_redis_connection(node).pipeline(transaction=False)
        pipe.execute_command(*scope.scripts.command("publish", args))
        pipe.execute_command("WAIT", self.options.wait_replicas, self.options.wait_timeout_ms)
        try:
            reply, acked = pipe.execute()
        except redis.exceptions.ResponseError as exc:
            if scope.scripts.recover(exc):  # the library was missing: load it, try again
                return self._publish_durably(scope, args)
            self._refresh_topology()  # MOVED / ASK / CLUSTERDOWN: the slot's primary changed
            raise
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError):
            self._refresh_topology()
            raise
        if int(acked) < self.options.wait_replicas:
            raise NotDurable(
                f"publish confirmed by {acked} of the {self.options.wait_replicas} replicas "
                f"plus_redis_wait_replicas asks for within {self.options.wait_timeout_ms} ms")
        return reply

    def _refresh_topology(self) -> None:
        """Read the slot map again (a failover moved a slot): the next try goes to its new
        primary. The caller raises its own error; a refresh that fails waits for the next."""
        with contextlib.suppress(redis.exceptions.RedisError, RedisClusterException):
            self.client.nodes_manager.initialize()

    def publish_many(self, jobs: Sequence[NewJob]) -> list[PublishOutcome]:
        """One pipeline per queue (one slot each); with ``wait_replicas``, one by one."""
        if self.options.wait_replicas > 0:
            return [self.publish(job) for job in jobs]
        for job in jobs:
            self._check_continuation(job)
        outcomes: dict[int, PublishOutcome] = {}
        by_queue: dict[str, list[int]] = defaultdict(list)
        for index, job in enumerate(jobs):
            by_queue[job.queue].append(index)
        for name, indexes in by_queue.items():
            published = self.queue(name).publish_many([jobs[i] for i in indexes])
            for i, outcome in zip(indexes, published, strict=True):
                outcomes[i] = outcome
                self._remember(jobs[i].id, name)
        return [outcomes[i] for i in range(len(jobs))]

    # -- consuming ------------------------------------------------------------------------
    def claim(self, queues: Sequence[str], worker_id: str, max_jobs: int,
              settles: Sequence[Settle] = ()) -> ClaimResult:
        result = ClaimResult(dead_lettered=self.settle(settles))
        dues: list[float] = []
        for name in queues:
            if len(result.claims) >= max_jobs:
                break
            part = self.queue(name).claim([name], worker_id, max_jobs - len(result.claims))
            for claim in part.claims:
                self._remember(claim.job_id, name)
            result.claims += part.claims
            result.blocked += part.blocked
            if part.next_due is not None:
                dues.append(part.next_due)
        result.next_due = min(dues) if dues else None
        return result

    def claim_job(self, job_id: str, worker_id: str) -> JobClaim:
        scope = self._job_scope(job_id)
        return JobClaim("missing") if scope is None else scope.claim_job(job_id, worker_id)

    def settle(self, settles: Sequence[Settle]) -> list[tuple[str, str]]:
        dead: list[tuple[str, str]] = []
        for name, group in self._by_queue(settles, lambda s: s.job_id).items():
            if name is not None:
                dead += self.queue(name).settle(group)
        return dead

    def heartbeat(self, held: Sequence[tuple[str, int]],
                  starts: Sequence[int | None] | None = None) -> list[Verdict]:
        """Each queue's claims in one step of its scope; a job of no known queue has no
        record: lost. Verdicts in the order of ``held``."""
        verdicts = [Verdict.LOST] * len(held)
        marks = starts if starts is not None else [None] * len(held)
        for name, group in self._by_queue(enumerate(held), lambda h: h[1][0]).items():
            if name is not None:
                answer = self.queue(name).heartbeat([pair for _, pair in group],
                                                    [marks[at] for at, _ in group])
                for (at, _), verdict in zip(group, answer, strict=True):
                    verdicts[at] = verdict
        return verdicts

    def rate_started(self, job_id: str, token: int) -> None:
        scope = self._job_scope(job_id)
        if scope is not None:
            scope.rate_started(job_id, token)

    def recover(self, limit: int = 100) -> list[Recovered]:
        found: list[Recovered] = []
        for scope in self._all():
            found += scope.recover(limit)
        return found

    def maintain(self, worker_id: str) -> bool:
        """Housekeeping of every queue, if no other worker ran it this interval (one
        store-wide throttle, in the global scope). True if it ran.

        First, once an interval, this process's queues are written to the registry again:
        its ``SADD`` is not followed by ``WAIT``, so a failover of the global slot's primary
        can lose it while the queue's jobs survive, and other processes would not see it."""
        self._register_again()
        if not self.client.set(self.store.key("maint"), worker_id, nx=True,
                               px=self.maintenance_interval_ms):
            return False
        for scope in self._all():
            scope.renews_waiting_holds = self.renews_waiting_holds
            scope.run_maintenance()
        return True

    def _register_again(self) -> None:
        now = time.monotonic()
        if not self._registered or now < self._registered_again_at:
            return
        self._registered_again_at = now + self.maintenance_interval_ms / 1000
        self.client.sadd(self._registry, *sorted(self._registered))

    def wait(self, queues: Sequence[str], transient: Sequence[str],
             timeout: float) -> tuple[str, str, bytes | None] | None:
        """Block until a wake-up for ``queues`` or a message on ``transient`` queues.

        One blocking pop covers one slot: with keys in several slots, each slot is popped in
        turn for at most :data:`WAIT_SLICE_S` until ``timeout``."""
        keys = {self.queue(q).key("wake", q): ("wake", q) for q in queues}
        keys.update({self.store.key("t", q): ("transient", q) for q in transient})
        if not keys:
            return None
        by_slot: dict[int, list[str]] = defaultdict(list)
        for key in keys:
            by_slot[self.client.keyslot(key)].append(key)
        groups = list(by_slot.values())
        deadline = time.monotonic() + max(timeout, 0.01)
        turn = 0
        while True:
            left = deadline - time.monotonic()
            slice_s = left if len(groups) == 1 else min(left, WAIT_SLICE_S)
            try:
                reply = self.client.blpop(groups[turn % len(groups)], timeout=max(slice_s, 0.01))
            except redis.exceptions.TimeoutError:
                return None
            if reply is not None:
                kind, queue = keys[_text(reply[0])]
                body = reply[1]
                if kind == "wake":
                    return ("wake", queue, None)
                return ("transient", queue,
                        body if isinstance(body, bytes) else str(body).encode())
            turn += 1
            if time.monotonic() >= deadline:
                return None

    # -- leases of roles and periodic schedules (global scope) ----------------------------
    def lead(self, role: str, holder: str, ttl_ms: int) -> bool:
        return self.store.lead(role, holder, ttl_ms)

    def resign(self, role: str, holder: str) -> None:
        self.store.resign(role, holder)

    def role_holder(self, role: str) -> tuple[str, int] | None:
        return self.store.role_holder(role)

    def schedule_register(self, name: str, last_due_ms: int, task: str = "",
                          schedule: str = "") -> ScheduleRecord:
        return self.store.schedule_register(name, last_due_ms, task, schedule)

    def schedule_fire(self, name: str, expected_last_ms: int, due_ms: int, next_ms: int,
                      job: NewJob | None) -> str:
        """Advance the entry (global scope), then publish the tick's job (its queue's).

        Two steps, not one script: a publisher that dies between them loses that tick
        (at most once, where one server fires exactly once)."""
        outcome = self.store.schedule_fire(name, expected_last_ms, due_ms, next_ms, None)
        if job is None or outcome != "skipped":
            return outcome
        self.store.client.hset(self.store.key("beat", name), "job", job.id)
        self.store.client.hincrby(self.store.key("beat", name), "fired", 1)
        self.publish(job)
        return "fired"

    def schedules(self) -> list[ScheduleRecord]:
        return self.store.schedules()

    def schedule_pause(self, name: str, paused: bool) -> bool:
        return self.store.schedule_pause(name, paused)

    def schedule_delete(self, name: str) -> bool:
        return self.store.schedule_delete(name)

    def queue_pause(self, queue: str, paused: bool) -> int:
        return self.queue(queue).queue_pause(queue, paused)

    def worker_beat(self, beat: WorkerBeat) -> None:
        self.store.worker_beat(beat)

    def worker_beats(self) -> list[WorkerBeat]:
        return self.store.worker_beats()

    def rate_usage(self) -> list[RateUsage]:
        found = {u.group: u for scope in [self.store, *self._all()] for u in scope.rate_usage()}
        return [found[g] for g in sorted(found)]

    def paused_queues(self) -> dict[str, int]:
        paused: dict[str, int] = {}
        for name in self.queues():
            paused.update(self.queue(name).paused_queues())
        return paused

    # -- transient messages and bindings --------------------------------------------------
    def push_transient(self, queue: str, message: bytes | str) -> None:
        self.store.push_transient(queue, message)

    def pop_transient(self, queue: str) -> bytes | None:
        return self.store.pop_transient(queue)

    def transient_size(self, queue: str) -> int:
        return self.store.transient_size(queue)

    def purge_transient(self, queue: str) -> int:
        return self.store.purge_transient(queue)

    def mark_transient(self, queue: str, ttl_ms: int) -> None:
        self.store.mark_transient(queue, ttl_ms)

    def is_marked_transient(self, queue: str) -> bool:
        return self.store.is_marked_transient(queue)

    def bind(self, exchange: str, binding: str, ttl_ms: int = 0) -> None:
        self._scope(exchange_scope(exchange)).bind(exchange, binding, ttl_ms)

    def unbind(self, exchange: str, binding: str) -> None:
        self._scope(exchange_scope(exchange)).unbind(exchange, binding)

    def bindings(self, exchange: str) -> list[str]:
        return self._scope(exchange_scope(exchange)).bindings(exchange)

    # -- queue management -----------------------------------------------------------------
    def size(self, queue: str) -> int:
        return self.queue(queue).size(queue)

    def purge(self, queue: str) -> int:
        return self.queue(queue).purge(queue)

    def scheduled_jobs(self, queues: Sequence[str], limit: int = 1000) -> list[ScheduledJob]:
        found: list[ScheduledJob] = []
        for name in queues:
            found += self.queue(name).scheduled_jobs([name], limit)
        found.sort(key=lambda job: (job.due_ms, job.job_id))
        return found[:limit]

    # -- reads (by job id: the job's queue; store-wide: every queue) ----------------------
    def record(self, job_id: str) -> JobRecord | None:
        scope = self._job_scope(job_id)
        return None if scope is None else scope.record(job_id)

    def raw_message(self, job_id: str) -> bytes | None:
        scope = self._job_scope(job_id)
        return None if scope is None else scope.raw_message(job_id)

    def stats(self) -> dict[str, int]:
        total: dict[str, int] = defaultdict(int)
        for scope in self._all():
            for name, value in scope.stats().items():
                total[name] += value
        return dict(total)
