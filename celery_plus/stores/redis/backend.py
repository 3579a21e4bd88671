"""The durable store on Redis: a thin dispatcher over the Lua scripts in ``lua/``.

Every state change is one script (see ``lua/lib.lua`` for the key schema). Claims are sent
in the same round trip as the settles that piled up since the last claim.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Sequence
from typing import Any

import redis
from celery.exceptions import ImproperlyConfigured
from redis.cluster import RedisCluster

from celery_plus.model import formats
from celery_plus.model.details import encode_detail
from celery_plus.model.options import DEFAULT_OPTIONS, OptionsView, StoreOptions
from celery_plus.model.store import (
    RATE_GROUPS_MAX,
    WORKER_RECORD_KEEP_MS,
    Backend,
    Claim,
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
    rate_usage_of,
)
from celery_plus.settings import PlusConfig
from celery_plus.stores.readers import Readers, RecordSource, readers_for
from celery_plus.stores.redis import listing_index
from celery_plus.stores.redis.connect import RedisConnect, from_kombu
from celery_plus.stores.redis.envelope import MARK, deflated, envelope_bytes, envelope_or_none
from celery_plus.stores.redis.eviction import check_policy
from celery_plus.stores.redis.record import job_record
from celery_plus.stores.redis.scripts import ScriptLibrary, admin_sources, pack, store_sources

logger = logging.getLogger("celery_plus.stores.redis")


def _glob(text: str) -> str:
    """``text`` as a literal in a SCAN MATCH pattern."""
    return "".join(f"\\{c}" if c in "*?[]\\" else c for c in text)

TRANSIENT_TTL_S = 300

#: Drops the lapsed bindings of an exchange (by the server clock). KEYS[1]: the exchange's
#: bindings (set), KEYS[2]: their deadlines (sorted set, binding -> ms; permanent bindings
#: have none). Shared head of the two scripts below.
_DROP_LAPSED = """
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local lapsed = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', '(' .. ms)
if #lapsed > 0 then
    redis.call('SREM', KEYS[1], unpack(lapsed))
    redis.call('ZREM', KEYS[2], unpack(lapsed))
end
"""
#: ARGV[1]: the binding, ARGV[2]: its lifetime in ms (0: permanent).
_BIND = _DROP_LAPSED + """
redis.call('SADD', KEYS[1], ARGV[1])
local ttl = tonumber(ARGV[2])
if ttl > 0 then
    redis.call('ZADD', KEYS[2], ms + ttl, ARGV[1])
else
    redis.call('ZREM', KEYS[2], ARGV[1])
end
"""
_BINDINGS = _DROP_LAPSED + "return redis.call('SMEMBERS', KEYS[1])\n"
#: Sets a schedule entry's pause flag (ARGV[1]) if the entry (KEYS[1]) exists.
_PAUSE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'paused', ARGV[1])
return 1
"""

#: The clock of the node holding KEYS[1]'s slot (a Redis Cluster routes the call by its key).
_TIME = "return redis.call('TIME')"

#: KEYS[1]'s deadline (server ms; -1 without a TTL or key) and, with ARGV[1] = '1', its
#: (string) value, read atomically (one script: on a Redis Cluster TIME cannot be pipelined).
# PEXPIRETIME (Redis 7) reads the stored deadline itself. Redis 6.2 has none: there TIME plus
# PTTL, which came out 1 ms off now and then on Redis 7 (two clocks in one script).
_DEADLINE = """
local value = false
if ARGV[1] == '1' then value = redis.call('GET', KEYS[1]) end
local at = redis.pcall('PEXPIRETIME', KEYS[1])
if type(at) == 'number' then return {value, at < 0 and -1 or at} end
local t = redis.call('TIME')
local ttl = redis.call('PTTL', KEYS[1])
if ttl < 0 then return {value, -1} end
return {value, tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) + ttl}
"""


#: The defaults of publish.lua's arguments 10 to 19, which a publish may leave out.
_PUBLISH_DEFAULTS = (1, 0, "", "", 0, "", 0, "", 0, 0)


_TEXT_MARK = MARK.decode()


def _marked(message: str | bytes) -> bool:
    """True for a message that begins with the deflated envelope's mark (``envelope.py``)."""
    if isinstance(message, str):
        return message.startswith(_TEXT_MARK)  # (the mark is ASCII: the same in UTF-8)
    return bytes(message[:len(MARK)]) == MARK


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def verdicts_of(count: int, reply: Sequence[Any]) -> list[Verdict]:
    """The verdicts of ``count`` claims from ``heartbeat.lua``'s reply: (position, verdict)
    of each claim not renewed (positions from 1), every other one renewed."""
    verdicts = [Verdict.RENEWED] * count
    for i in range(0, len(reply), 2):
        verdicts[int(reply[i]) - 1] = Verdict(_text(reply[i + 1]))
    return verdicts


class RedisBackend(OptionsView, Backend):
    """Store operations on one Redis server (``redis://``, ``rediss://`` or a Sentinel
    master, connected as ``connector`` says: ``connect.py``)."""

    @classmethod
    def from_url(cls, url: str, config: PlusConfig, connection: Any = None) -> RedisBackend:
        """The store at ``url`` (``redis://``, ``rediss://``, ``sentinel://``), connected as
        the broker's kombu ``connection`` says (TLS, Sentinel), as kombu's Redis transport."""
        options = StoreOptions.of(config)
        if options.wait_replicas > 0:
            # Refused, not ignored: the publisher asked for replica-confirmed publishes.
            scheme = url.partition("://")[0]
            raise ImproperlyConfigured(
                f"plus_redis_wait_replicas = {options.wait_replicas} applies to a Redis Cluster "
                f"store (plus+redis+cluster://) only; a plus+{scheme}:// store does not WAIT "
                "for replicas after a publish. Set it to 0 (docs/redis-cluster.md).")
        return cls(url, options, connector=from_kombu(url, connection),
                   allow_eviction=config.redis_allow_eviction)


    def __init__(
        self,
        url: str,
        options: StoreOptions = DEFAULT_OPTIONS,
        *,
        connector: RedisConnect | None = None,
        client: Any = None,
        allow_eviction: bool | None = None,
        readers: Readers | None = None,
        records: RecordSource | None = None,
    ) -> None:
        self.url = url
        #: ``plus_redis_allow_eviction``: :meth:`connect` refuses (False) or warns about (True)
        #: a server that may evict keys, once (``eviction.py``); None (a store built by hand,
        #: not from settings) skips the check.
        self.allow_eviction = allow_eviction
        self._policy_checked = allow_eviction is None
        self.options = options
        self.connector = connector or RedisConnect(url)
        #: A client given (a Redis Cluster's, shared by the scopes of one cluster store:
        #: stores/redis/cluster.py) is the caller's to close.
        self._owns_client = client is None
        self.client = self.connector.client() if client is None else client
        self.scripts = ScriptLibrary(self.client, *store_sources())
        self._bind_script = self.client.register_script(_BIND)
        self._bindings_script = self.client.register_script(_BINDINGS)
        self._pause_script = self.client.register_script(_PAUSE)
        self._deadline_script = self.client.register_script(_DEADLINE)
        self._time_script = self.client.register_script(_TIME)
        #: Whether the live workers read the compact layout (``stores/readers.py``): a
        #: publish writes it only then. One per store in a process (every connection's
        #: backend shares it); a Redis Cluster's scopes share their store's, and look at
        #: the worker records through its global scope (``records``).
        self.readers = readers or readers_for((url, options.prefix),
                                              "plus_redis_compact_records = False")
        self._records: RecordSource = records or self
        self._publish_lock = threading.Lock()
        self._publish_conn: Any = None
        self._publish_pid = 0

    def connect(self) -> None:
        """Raise a connection error unless the server answers (``Transport.establish_connection``;
        redis-py itself connects on first use) or it refuses writes (``refusals.py``: a small
        write to ``<prefix>:probe``), and refuse a server whose ``maxmemory-policy`` may evict
        the store's keys (``eviction.py``)."""
        self.client.ping()
        if not self._policy_checked:
            check_policy(self.client, self.url, allow_eviction=bool(self.allow_eviction))
            self._policy_checked = True
        # A server that refuses writes for now (refusals.py) answers PING: one small write
        # makes it fail here, so Celery reconnects with back-off instead of at once.
        self.client.set(self.key("probe"), "1", px=60_000)

    # -- keys -------------------------------------------------------------------------
    def key(self, *parts: str) -> str:
        return ":".join((self.prefix, *parts))

    # -- publishing -------------------------------------------------------------------
    def publish(self, job: NewJob) -> PublishOutcome:
        return self._outcome(job, self._eval_publish(self._publish_args(job)))

    def _eval_publish(self, args: list[Any]) -> Any:
        """Run the publish script on a connection kept for publishing.

        The hot path of every ``delay()`` skips redis-py's per-command machinery (pool
        checkout, retry wrapper, instrumentation). Anything unusual — no connection yet in
        this process, a server that lost the scripts, a connection error — takes the
        client's normal path with its retry policy. Publishing twice after a lost reply is
        harmless: a publish of a waiting job's id replaces its message, and one of a running
        job's id (or a continuation already applied) changes nothing.
        """
        if not self._owns_client:
            return self.scripts.run("publish", args)
        with self._publish_lock:
            conn = self._publish_conn
            if conn is None or self._publish_pid != os.getpid():
                conn = self._publish_conn = self.client.connection_pool.make_connection()
                self._publish_pid = os.getpid()
            try:
                # connect() first: a Sentinel-managed connection finds its master there
                # (send_packed_command alone would dial the default host).
                conn.connect()
                conn.send_packed_command([pack(self.scripts.command("publish", args))])
                return conn.read_response()
            except redis.exceptions.ResponseError as exc:
                if not self.scripts.recover(exc):
                    raise
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError):
                conn.disconnect()
        return self.scripts.run("publish", args)

    def publish_many(self, jobs: Sequence[NewJob]) -> list[PublishOutcome]:
        replies = self.scripts.pipeline([("publish", self._publish_args(job)) for job in jobs])
        return [self._outcome(job, reply) for job, reply in zip(jobs, replies, strict=True)]

    def writes_compact(self) -> bool:
        """Whether a publish now writes the compact layout: ``plus_redis_compact_records``,
        and every live worker reads it (its record says so: ``stores/readers.py``)."""
        return self.options.compact_records \
            and self.readers.all_read(formats.Z1, self._records)

    def _publish_args(self, job: NewJob, whole: bool = False) -> list[Any]:
        """publish.lua's arguments for ``job``: every field one argument (the script parses
        nothing), those after the 9th left out while they hold their default (the server
        takes in each argument; a plain ``delay()`` needs 9) unless ``whole``."""
        compact = self.writes_compact()
        message: str | bytes = job.message
        if compact and (self.options.deflate or _marked(message)):
            # Deflated unless plus_redis_deflate is False: it halves the memory of a waiting
            # job for some of the publisher's CPU (docs/decisions.md). A message that starts
            # as a deflated one is deflated too, so it comes back exact; every release since
            # the compact layout reads both.
            message = deflated(message)
        args: list[Any] = [
            self.prefix, job.id, job.queue, message, job.name, int(self.backstop_ms),
            int(job.priority), int(job.eta_ms), int(job.max_deliveries), 1 if compact else 0,
            int(job.lease_token), job.unique_lock, job.unique_window, int(job.unique_ttl_ms),
            job.concurrency_group, int(job.concurrency_limit), job.rate_group,
            int(job.rate_limit), int(job.rate_window_ms)]
        while not whole and len(args) > 9 and args[-1] == _PUBLISH_DEFAULTS[len(args) - 10]:
            args.pop()
        return args

    @staticmethod
    def _outcome(job: NewJob, reply: Any) -> PublishOutcome:
        if isinstance(reply, list):  # {'fenced', state}
            return PublishOutcome(False, job.id, holder_id=job.id, state=_text(reply[1]),
                                  fenced=True)
        if not isinstance(reply, int):
            return PublishOutcome(False, job.id, holder_id=_text(reply))
        state = "scheduled" if reply % 10 == 2 else "enqueued"
        return PublishOutcome(True, job.id, state=state, continued=reply >= 10)

    # -- consuming --------------------------------------------------------------------
    def claim(
        self,
        queues: Sequence[str],
        worker_id: str,
        max_jobs: int,
        settles: Sequence[Settle] = (),
    ) -> ClaimResult:
        claim_args: list[Any] = [
            self.prefix, worker_id, self.lease_ms, max_jobs,
            max(self.scan_limit, 4 * max_jobs), self.backstop_ms, *queues,
        ]
        result = ClaimResult()
        if settles:
            settled, claimed = self.scripts.pipeline(
                [("settle", self._settle_args(settles)), ("claim", claim_args)])
            result.dead_lettered = self._dead_pairs(settled)
        else:
            claimed = self.scripts.run("claim", claim_args)
        flat, blocked, next_due = claimed
        result.next_due = None if next_due < 0 else next_due / 1000.0
        for i in range(0, len(flat), 5):
            # No message (claim.lua dead-letters these; a script of another release may not):
            # an empty one, which the channel dead-letters as 'message missing'.
            message = b"" if flat[i + 2] is None else envelope_bytes(flat[i + 2])
            result.claims.append(
                Claim(_text(flat[i]), int(flat[i + 1]), message, int(flat[i + 3]),
                      _text(flat[i + 4]))
            )
        result.blocked = [_text(b) for b in blocked]
        return result

    def claim_job(self, job_id: str, worker_id: str) -> JobClaim:
        """Claim one waiting job by id (``lua/claim_job.lua``)."""
        outcome, state, token, deliveries, left = self.scripts.run(
            "claim_job", [self.prefix, job_id, worker_id, self.lease_ms, self.backstop_ms])
        return JobClaim(_text(outcome), _text(state), int(token), int(deliveries), int(left))

    def settle(self, settles: Sequence[Settle]) -> list[tuple[str, str]]:
        if not settles:
            return []
        return self._dead_pairs(self.scripts.run("settle", self._settle_args(settles)))

    def _settle_args(self, settles: Sequence[Settle]) -> list[Any]:
        args: list[Any] = [self.prefix, self.backstop_ms]
        for s in settles:
            args += [s.job_id, s.token, s.action, encode_detail(s.detail) or "",
                     "" if s.run_ms is None else int(s.run_ms)]
        return args

    @staticmethod
    def _dead_pairs(reply: Any) -> list[tuple[str, str]]:
        dead = reply[1]
        return [(_text(dead[i]), _text(dead[i + 1])) for i in range(0, len(dead), 2)]

    def heartbeat(self, held: Sequence[tuple[str, int]],
                  starts: Sequence[int | None] | None = None) -> list[Verdict]:
        if not held:
            return []
        args: list[Any] = [self.prefix, self.lease_ms]
        marks = starts if starts is not None else [None] * len(held)
        for (job_id, token), mark in zip(held, marks, strict=True):
            args += [job_id, token, "" if mark is None else int(mark)]
        return verdicts_of(len(held), self.scripts.run("heartbeat", args))

    def recover(self, limit: int = 100) -> list[Recovered]:
        reply = self.scripts.run("recover", [self.prefix, limit, self.backstop_ms])
        return [Recovered(_text(reply[i]), _text(reply[i + 1])) for i in range(0, len(reply), 2)]

    def maintain(self, worker_id: str) -> bool:
        """Run housekeeping if no other worker ran it this interval. True if it ran."""
        if not self.client.set(self.key("maint"), worker_id, nx=True,
                               px=self.maintenance_interval_ms):
            return False
        self.run_maintenance()
        return True

    def run_maintenance(self) -> None:
        """One housekeeping pass (``lua/maintain.lua``), unthrottled."""
        comp_ret, comp_max, dead_ret, dead_max = self.retention
        self.scripts.run("maintain", [self.prefix, 500, comp_ret, comp_max, dead_ret, dead_max,
                                      self.backstop_ms, int(self.renews_waiting_holds)])
        # The admin's index of dead letters, on a store an earlier release wrote (bounded).
        listing_index.build_dead_letters(self.client, self.prefix, self._index_sync_script())

    def _index_sync_script(self) -> Any:
        script = self.__dict__.get("_index_sync")
        if script is None:
            script = self.__dict__["_index_sync"] = self.client.register_script(
                admin_sources()["index_sync"])
        return script

    def rate_started(self, job_id: str, token: int) -> None:
        self.scripts.run("rate_start", [self.prefix, job_id, int(token)])

    # -- leases of roles and periodic schedules (lua/lead.lua, lua/fire.lua) ------------
    def lead(self, role: str, holder: str, ttl_ms: int) -> bool:
        return bool(self.scripts.run("lead", [self.prefix, role, holder, max(int(ttl_ms), 1)]))

    def resign(self, role: str, holder: str) -> None:
        self.scripts.run("lead", [self.prefix, role, holder, 0])

    def role_holder(self, role: str) -> tuple[str, int] | None:
        holder, deadline = self._deadline_script(keys=[self.key("lead", role)], args=["1"])
        if holder is None or deadline < 0:
            return None
        return _text(holder), int(deadline)

    def schedule_register(self, name: str, last_due_ms: int, task: str = "",
                          schedule: str = "") -> ScheduleRecord:
        key = self.key("beat", name)
        pipe = self.client.pipeline(transaction=True)
        pipe.hsetnx(key, "last", int(last_due_ms))
        pipe.hset(key, mapping={"task": task, "sched": schedule})
        pipe.sadd(self.key("beats"), name)
        pipe.hgetall(key)
        return self._schedule_record(name, pipe.execute()[-1])

    def schedule_fire(self, name: str, expected_last_ms: int, due_ms: int, next_ms: int,
                      job: NewJob | None) -> str:
        publish = self._publish_args(job, whole=True) if job is not None else [
            self.prefix, "", "", "", "", 0, 0, 0, 0, 1, 0, "", "", 0, "", 0, "", 0, 0]
        reply = self.scripts.run("fire", [*publish, name, int(expected_last_ms), int(due_ms),
                                          int(next_ms), "1" if job is not None else "0"])
        if isinstance(reply, list) and reply and _text(reply[0]) == "beat":
            return _text(reply[1])
        return "fired"

    def schedules(self) -> list[ScheduleRecord]:
        names = sorted(_text(n) for n in self.client.smembers(self.key("beats")))
        pipe = self.client.pipeline(transaction=False)
        for name in names:
            pipe.hgetall(self.key("beat", name))
        return [self._schedule_record(name, raw)
                for name, raw in zip(names, pipe.execute(), strict=True) if raw]

    def schedule_pause(self, name: str, paused: bool) -> bool:
        return bool(self._pause_script(keys=[self.key("beat", name)],
                                       args=["1" if paused else "0"]))

    def queue_pause(self, queue: str, paused: bool) -> int:
        """Pause or resume ``queue`` (``lua/pause.lua``); the server ms of the step."""
        return int(self.scripts.run("pause", [self.prefix, queue, "1" if paused else "0"]))

    def paused_queues(self) -> dict[str, int]:
        return {_text(q): int(ms) for q, ms in self.client.hgetall(self.key("paused")).items()}

    def worker_beat(self, beat: WorkerBeat) -> None:
        self.scripts.run("worker_beat", [self.prefix, beat.node, json.dumps(beat.info()),
                                         WORKER_RECORD_KEEP_MS])

    def rate_usage(self) -> list[RateUsage]:
        """The rate groups with keys (``P:rate:*``, ``P:ratep:*``: a bounded SCAN) or parked
        jobs (``P:rblkgroups``); each group's limit and window from one of its jobs."""
        groups: set[str] = {_text(g) for g in self.client.smembers(self.key("rblkgroups"))}
        for kind in ("rate", "ratep"):
            head = self.key(kind) + ":"
            for key in self.client.scan_iter(match=_glob(head) + "*", count=1000):
                groups.add(_text(key)[len(head):])
                if len(groups) >= RATE_GROUPS_MAX:
                    break
        names = sorted(groups)[:RATE_GROUPS_MAX]
        now = self.now_ms()
        pipe = self.client.pipeline(transaction=False)
        for g in names:
            pipe.zrange(self.key("rate", g), 0, -1, withscores=True)
            pipe.zrange(self.key("ratep", g), 0, -1, withscores=True)
            pipe.zcard(self.key("rblk", g))
            pipe.zrange(self.key("rblk", g), 0, 0)
        replies = pipe.execute()
        claims: list[tuple[str, bool, int]] = []
        parked: dict[str, int] = {}
        sample: dict[str, str] = {}
        for n, g in enumerate(names):
            started, pending, count, first = replies[4 * n: 4 * n + 4]
            claims += [(g, True, int(at)) for _, at in started]
            claims += [(g, False, int(at)) for _, at in pending]
            parked[g] = int(count)
            members = [_text(m).rpartition(":")[0] for m, _ in [*started, *pending]]
            job = members[0] if members else (_text(first[0]) if first else "")
            if job:
                sample[g] = job
        pipe = self.client.pipeline(transaction=False)
        for job in sample.values():
            pipe.hmget(self.key("job", job), "rl", "rw")
        limits = {g: (int(_text(rl) or 0), int(_text(rw) or 0))
                  for g, (rl, rw) in zip(sample, pipe.execute(), strict=True)}
        return rate_usage_of(now, claims, limits, parked)

    def worker_beats(self) -> list[WorkerBeat]:
        out = []
        for node, raw in sorted(self.client.hgetall(self.key("workers")).items()):
            try:
                info = json.loads(_text(raw))
            except ValueError:
                continue
            if isinstance(info, dict):
                out.append(WorkerBeat.of(_text(node), info, int(info.get("started_ms") or 0),
                                         int(info.get("at_ms") or 0)))
        return out

    def schedule_delete(self, name: str) -> bool:
        pipe = self.client.pipeline(transaction=True)
        pipe.delete(self.key("beat", name))
        pipe.srem(self.key("beats"), name)
        return bool(pipe.execute()[0])

    @staticmethod
    def _schedule_record(name: str, raw: Any) -> ScheduleRecord:
        f = {_text(k): _text(v) for k, v in raw.items()}
        return ScheduleRecord(
            name=name, last_due_ms=int(f.get("last") or 0), paused=f.get("paused") == "1",
            task=f.get("task", ""), schedule=f.get("sched", ""),
            next_due_ms=int(f.get("next") or 0), last_job_id=f.get("job", ""),
            fired=int(f.get("fired") or 0))

    def wait(
        self, queues: Sequence[str], transient: Sequence[str], timeout: float
    ) -> tuple[str, str, bytes | None] | None:
        """Block until a wake-up for ``queues`` or a message on ``transient`` queues."""
        keys = [self.key("wake", q) for q in queues] + [self.key("t", q) for q in transient]
        if not keys:
            return None
        try:
            reply = self.client.blpop(keys, timeout=max(timeout, 0.01))
        except redis.exceptions.TimeoutError:
            # The read deadline passed while this thread was busy elsewhere (a green pool
            # running a CPU-bound task): an empty wait; redis-py dropped the connection.
            return None
        if reply is None:
            return None
        key = _text(reply[0])
        kind, _, queue = key[len(self.prefix) + 1:].partition(":")
        if kind == "wake":
            return ("wake", queue, None)
        body = reply[1]
        return ("transient", queue, body if isinstance(body, bytes) else str(body).encode())

    # -- transient messages (remote control, replies, events) -------------------------
    def push_transient(self, queue: str, message: bytes | str) -> None:
        key = self.key("t", queue)
        pipe = self.client.pipeline(transaction=False)
        pipe.rpush(key, message)
        pipe.expire(key, TRANSIENT_TTL_S)
        pipe.execute()

    def pop_transient(self, queue: str) -> bytes | None:
        value: Any = self.client.lpop(self.key("t", queue))
        return value if value is None or isinstance(value, bytes) else str(value).encode()

    def _binding_keys(self, exchange: str) -> list[str]:
        return [self.key("bind", exchange), self.key("bindttl", exchange)]

    def bind(self, exchange: str, binding: str, ttl_ms: int = 0) -> None:
        self._bind_script(keys=self._binding_keys(exchange), args=[binding, int(ttl_ms)])

    def unbind(self, exchange: str, binding: str) -> None:
        bindings, deadlines = self._binding_keys(exchange)
        pipe = self.client.pipeline(transaction=True)
        pipe.srem(bindings, binding)
        pipe.zrem(deadlines, binding)
        pipe.execute()

    def bindings(self, exchange: str) -> list[str]:
        return [_text(b) for b in self._bindings_script(keys=self._binding_keys(exchange))]

    def mark_transient(self, queue: str, ttl_ms: int) -> None:
        self.client.set(self.key("tmark", queue), 1, px=max(int(ttl_ms), 1))

    def is_marked_transient(self, queue: str) -> bool:
        return bool(self.client.exists(self.key("tmark", queue)))

    # -- queue management -------------------------------------------------------------
    def size(self, queue: str) -> int:
        return int(self.client.zcard(self.key("q", queue)))

    def transient_size(self, queue: str) -> int:
        return int(self.client.llen(self.key("t", queue)))

    def scheduled_jobs(self, queues: Sequence[str], limit: int = 1000) -> list[ScheduledJob]:
        """Walk ``P:sched`` (by due ms) in chunks, keeping the jobs of ``queues``."""
        wanted, start, chunk = set(queues), 0, 500
        found: list[ScheduledJob] = []
        while len(found) < limit:
            entries: list[Any] = self.client.zrange(
                self.key("sched"), start, start + chunk - 1, withscores=True)
            if not entries:
                break
            pipe = self.client.pipeline(transaction=False)
            for entry in entries:
                pipe.hmget(self.key("job", _text(entry[0])), ["q", "msg", "st"])
                pipe.get(self.key("m", _text(entry[0])))
            replies = pipe.execute()
            for (job_id, due), fields, stored in zip(entries, replies[::2], replies[1::2],
                                                     strict=True):
                queue, message, state = fields
                message = envelope_or_none(stored if message is None else message)
                if message is not None and _text(state) == "scheduled" \
                        and _text(queue or b"") in wanted:
                    found.append(ScheduledJob(_text(job_id), _text(queue), int(due), message))
            start += chunk
        found.sort(key=lambda job: (job.due_ms, job.job_id))
        return found[:limit]

    def purge(self, queue: str) -> int:
        """Delete the jobs waiting in ``queue`` and release their holds (``purge.lua``)."""
        return int(self.scripts.run("purge", [self.prefix, queue]))

    def purge_transient(self, queue: str) -> int:
        key = self.key("t", queue)
        pipe = self.client.pipeline(transaction=True)
        pipe.llen(key)
        pipe.delete(key)
        return int(pipe.execute()[0])

    # -- reads ------------------------------------------------------------------------
    def record(self, job_id: str) -> JobRecord | None:
        pipe = self.client.pipeline(transaction=True)
        pipe.hgetall(self.key("job", job_id))
        pipe.get(self.key("m", job_id))
        raw, message = pipe.execute()
        if not raw:
            return None
        fields = {_text(k): v for k, v in raw.items()}
        if message is not None and "msg" not in fields:
            fields["msg"] = envelope_bytes(message)  # its own key (P:m:{id}), as one record
        return job_record(job_id, fields)

    def now_ms(self) -> int:
        """The clock of the server whose scripts stamp this store's records: on a Redis
        Cluster the node of this scope's slot (a plain TIME would ask the client's default
        node, whose clock may differ from the one that stamped a worker record's at_ms)."""
        if isinstance(self.client, RedisCluster):
            sec, usec = self._time_script(keys=[self.prefix])
        else:
            sec, usec = self.client.time()
        return int(sec) * 1000 + int(usec) // 1000

    def close(self) -> None:
        with self._publish_lock:
            if self._publish_conn is not None and self._publish_pid == os.getpid():
                self._publish_conn.disconnect()
            self._publish_conn = None
        if self._owns_client:
            self.client.close()

    # -- the stored message and the counters ---------------------------------------------
    def raw_message(self, job_id: str) -> bytes | None:
        value: Any = self.client.hget(self.key("job", job_id), "msg")  # an older layout
        if value is None:
            value = self.client.get(self.key("m", job_id))
        return envelope_or_none(value)

    def stats(self) -> dict[str, int]:
        return {_text(k): int(v) for k, v in self.client.hgetall(self.key("stats")).items()}
