"""A Hypothesis state machine that drives a real store and the model side by side.

Each example opens a fresh store on a virtual clock (``clocks.py``) and the in-process model
(``celery_plus.stores.memory``, built from ``celery_plus.model.rules``) on the same clock, then runs
a random sequence of what clients, workers, operators and time do to a store: publishes
(unique windows and TTLs, concurrency groups, ETAs, priorities, delivery limits,
continuations carrying the current, an old or no lease token, the same message sent again),
claims by several workers (with settles piggybacked), claims by id, heartbeats, acks, fails,
rejects, requeues, deferrals and releases with current and stale tokens, worker crashes (its claims
stop being renewed; its late settles may still come), clock jumps past leases, holds and
TTLs, recovery, maintenance, admin retry / cancel / discard, and purge. Every operation's
reply must be the model's, and after every step what a user can observe must be the same:
each job's record (state, token, deliveries, message, times, history), its lease deadline,
every unique hold and its holder, every slot holder, the state indexes, queue sizes,
scheduled jobs and counters.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from celery_plus.model.admin import AdminStore, JobNotFound, RetryConflict
from celery_plus.model.options import StoreOptions
from celery_plus.model.store import Backend, ClaimResult, NewJob, Settle
from celery_plus.stores.memory import MemoryBackend
from celery_plus.stores.memory.admin import MemoryAdmin
from tests.inspectors import inspector_for

from .clocks import GUARD_MS, Clock, StoreUnderTest

#: The stores' options on both sides: short leases, holds and retention, so that clock
#: jumps reach them; maintenance never throttled by time (the test unthrottles it).
OPTIONS = StoreOptions(lease_ms=30_000, backstop_ms=120_000,
                       retention=(120_000, 4, 300_000, 3), maintenance_interval_ms=1)
START_MS = 1_700_000_000_000
JOBS = ("j0", "j1", "j2", "j3", "j4")
QUEUES = ("q1", "q2")
#: The last key is a two-field ``unique_by`` key (fields joined by U+001F).
KEYS = ("k1", "k2", "k\x1f3")
WINDOWS = ("pending", "running", "ttl")
TTLS = (60_000, 300_000)
GROUPS = {"g1": 1, "g2": 2}
#: One cluster rate group: at most 1 or 2 starts (the message says which) a minute.
RATE_GROUP, RATE_WINDOW_MS = "r", 60_000
WORKERS = ("w1", "w2", "w3")
#: ETA relative to now (None: no ETA).
ETAS = (None, None, None, None, -1_000, 5_000, 45_000, 200_000)
STEPS = (1, 1_001, 10_003, 30_001, 30_001, 61_003, 120_007, 400_009)
ACTIONS = ("ack", "fail", "reject", "requeue", "defer", "release")
DETAILS: tuple[dict[str, Any] | None, ...] = (
    None,
    {"reason": "task failed", "exc_type": "ValueError", "exc_message": "boom",
     "traceback": "Traceback ..."},
    # What str(exc) can hold: a lone surrogate, a NUL (issue #11, defect 2).
    {"reason": "task failed", "exc_type": "OSError", "exc_message": "bad name 'caf\udce9' \x00"},
)
STATES = ("enqueued", "scheduled", "blocked", "running", "completed", "failed", "canceled",
          "discarded")

#: Examples run by this process, and the first that found a difference (for the figures of
#: docs/model.md: how many examples it took).
COUNTS = {"examples": 0, "first_failure": 0}


@dataclass
class Delivery:
    """A claim some worker got: ``alive`` while the worker holds it and renews it."""

    worker: str
    job_id: str
    token: int
    alive: bool = True


def _claims(result: ClaimResult) -> tuple[Any, ...]:
    due = None if result.next_due is None else round(result.next_due * 1000)
    return (tuple((c.job_id, c.token, bytes(c.message), c.deliveries, c.queue)
                  for c in result.claims), tuple(result.blocked),
            tuple(result.dead_lettered), due)


def _outcome(call: Callable[[], Any], errors: bool = True) -> Any:
    """The call's result, or the admin error it raised; with ``errors``, any other
    exception as comparable text (a store that fails where the model does not)."""
    try:
        return call()
    except RetryConflict as exc:
        return ("RetryConflict", exc.job_id, exc.holder_id, exc.lock)
    except JobNotFound as exc:
        return ("JobNotFound", exc.job_id)
    except Exception as exc:
        if not errors:
            raise
        return ("raised", type(exc).__name__, str(exc)[:300])


class StoreVsModel(RuleBasedStateMachine):
    """Subclasses set :attr:`open_store` (a real store on a clock)."""

    open_store: ClassVar[Callable[[Clock], StoreUnderTest]]

    def __init__(self) -> None:
        super().__init__()
        COUNTS["examples"] += 1
        self.clock = Clock(START_MS)
        self.store = type(self).open_store(self.clock)
        self.model = MemoryBackend(options=OPTIONS, clock=self.clock)
        self.model_admin = MemoryAdmin(self.model)
        self.deliveries: list[Delivery] = []
        self.sent: dict[str, NewJob] = {}
        self.messages = 0

    def teardown(self) -> None:
        self.store.close()

    # -- running both sides -------------------------------------------------------------
    def both(self, what: str, call: Callable[[Backend, AdminStore], Any],
             view: Callable[[Any], Any] = lambda r: r) -> Any:
        """Run ``call`` on the store and on the model; their replies must agree. The
        admin's JobNotFound and RetryConflict are replies too; any other error of the store
        is a difference (the model's is a bug of the model: raised)."""
        theirs = _outcome(lambda: view(call(self.store.backend, self.store.admin)))
        ours = _outcome(lambda: view(call(self.model, self.model_admin)), errors=False)
        self.check(what, theirs, ours)
        return ours

    def check(self, what: str, theirs: Any, ours: Any) -> None:
        if theirs != ours:
            if not COUNTS["first_failure"]:
                COUNTS["first_failure"] = COUNTS["examples"]
            raise AssertionError(
                f"{self.store.kind} disagrees with the model on {what} (example "
                f"{COUNTS['examples']}, first difference in example {COUNTS['first_failure']})"
                f":\n  store: {theirs!r}\n  model: {ours!r}")

    def model_job(self, job_id: str) -> Any:
        return self.model.store.jobs.get(job_id)

    # -- publishing ---------------------------------------------------------------------
    def carried(self, job_id: str, carry: int) -> int:
        """The lease token a message carries: 0 none, 1 the job's last (current when it
        runs), else one of the tokens ever delivered for it."""
        job = self.model_job(job_id)
        if carry == 0 or job is None:
            return 0
        if carry == 1:
            return int(job.token or 0)
        tokens = sorted({d.token for d in self.deliveries if d.job_id == job_id})
        return tokens[carry % len(tokens)] if tokens else 0

    def message(self, job_id: str, queue: str, key: str | None, window: str, ttl: int,
                group: str | None, eta: int | None, priority: int, limit: int,
                rate: int | None, carry: int) -> NewJob:
        self.messages += 1
        return NewJob(
            id=job_id, queue=queue, message=f"m{self.messages}", name="t", priority=priority,
            eta_ms=0 if eta is None else self.clock.now + eta, unique_lock=key or "",
            unique_window=window if key else "",
            unique_ttl_ms=ttl if key and window == "ttl" else 0,
            concurrency_group=group or "", concurrency_limit=GROUPS[group] if group else 0,
            max_deliveries=limit, lease_token=self.carried(job_id, carry),
            rate_group=RATE_GROUP if rate else "", rate_limit=rate or 0,
            rate_window_ms=RATE_WINDOW_MS if rate else 0)

    MESSAGE = {"job_id": st.sampled_from(JOBS), "queue": st.sampled_from(QUEUES),
               "key": st.sampled_from((None, *KEYS)), "window": st.sampled_from(WINDOWS),
               "ttl": st.sampled_from(TTLS), "group": st.sampled_from((None, "g1", "g1", "g2")),
               "eta": st.sampled_from(ETAS), "priority": st.sampled_from((0, 0, 3, 9)),
               "limit": st.sampled_from((0, 0, 1, 2, 3)),
               "rate": st.sampled_from((None, None, None, 1, 2)),
               "carry": st.sampled_from((0, 0, 0, 1, 1, 2, 3))}

    @initialize(first=st.lists(st.fixed_dictionaries(MESSAGE), min_size=1, max_size=4))
    def jobs_waiting(self, first: list[dict[str, Any]]) -> None:
        """Every example starts with a few jobs published in one batch."""
        jobs = [self.message(**fields) for fields in first]
        self.sent.update((job.id, job) for job in jobs)
        self.both("publish_many", lambda b, a: b.publish_many(jobs))

    @rule(**MESSAGE)
    def publish(self, **fields: Any) -> None:
        job = self.message(**fields)
        self.sent[job.id] = job
        self.both("publish", lambda b, a: b.publish(job))

    @precondition(lambda self: bool(self.sent))
    @rule(n=st.integers(0, len(JOBS) - 1))
    def publish_the_same_message_again(self, n: int) -> None:
        """A client retrying a publish whose reply it lost."""
        job = list(self.sent.values())[n % len(self.sent)]
        self.both("the same publish again", lambda b, a: b.publish(job))

    @precondition(lambda self: bool(self.deliveries))
    @rule(n=st.integers(0, 200), fields=st.fixed_dictionaries(
        {k: v for k, v in MESSAGE.items() if k not in ("job_id", "carry")}))
    def task_retries(self, n: int, fields: dict[str, Any]) -> None:
        """A delivery's task calls ``retry()`` / ``replace()``: a message with its job id
        carrying its lease token — current, or stale when its claim was recovered, taken
        over or ended (a frozen worker's late retry)."""
        delivery = self.deliveries[n % len(self.deliveries)]
        job = dataclasses.replace(self.message(delivery.job_id, carry=0, **fields),
                                  lease_token=delivery.token)
        self.sent[job.id] = job
        self.both("a continuation", lambda b, a: b.publish(job))
        delivery.alive = False

    @rule(first=st.fixed_dictionaries(MESSAGE), second=st.fixed_dictionaries(MESSAGE))
    def publish_two_at_once(self, first: dict[str, Any], second: dict[str, Any]) -> None:
        jobs = [self.message(**first), self.message(**second)]
        self.sent.update((job.id, job) for job in jobs)
        self.both("publish_many", lambda b, a: b.publish_many(jobs))

    # -- workers ------------------------------------------------------------------------
    def delivered(self, worker: str, claims: list[tuple[str, int]]) -> None:
        self.deliveries += [Delivery(worker, job_id, token) for job_id, token in claims]

    def held(self, worker: str) -> list[Delivery]:
        return [d for d in self.deliveries if d.worker == worker and d.alive]

    @rule(worker=st.sampled_from(WORKERS),
          queues=st.sampled_from((["q1"], ["q2"], ["q1", "q2"], ["q2", "q1"])),
          max_jobs=st.integers(1, 4), settle=st.sampled_from((None, None, *ACTIONS)))
    def claim(self, worker: str, queues: list[str], max_jobs: int, settle: str | None) -> None:
        """A worker claims; with ``settle``, its claims held so far are settled in the same
        call (as the channel sends pending settles with its next claim)."""
        settles = [Settle(d.job_id, d.token, settle) for d in self.held(worker)] if settle else []
        result = self.both("claim", lambda b, a: b.claim(queues, worker, max_jobs, settles),
                           _claims)
        for d in self.held(worker) if settle else ():
            d.alive = False
        self.delivered(worker, [(c[0], c[1]) for c in result[0]])

    @rule(job_id=st.sampled_from(JOBS), worker=st.sampled_from(WORKERS))
    def claim_by_id(self, job_id: str, worker: str) -> None:
        """The coordination store's claim of one job id (any state, or none)."""
        got = self.both("claim_job", lambda b, a: b.claim_job(job_id, worker))
        if got.outcome == "claimed":
            self.delivered(worker, [(job_id, got.token)])

    def settle_some(self, picked: list[Delivery], action: str,
                    detail: dict[str, Any] | None) -> None:
        settles = [Settle(picked[0].job_id, picked[0].token, action, detail)]
        settles += [Settle(d.job_id, d.token, "ack") for d in picked[1:]]
        self.both("settle", lambda b, a: b.settle(settles))
        for d in picked:
            d.alive = False

    @precondition(lambda self: any(d.alive for d in self.deliveries))
    @rule(n=st.integers(0, 200), action=st.sampled_from(ACTIONS),
          detail=st.sampled_from(DETAILS), with_next=st.booleans())
    def task_ends(self, n: int, action: str, detail: dict[str, Any] | None,
                  with_next: bool) -> None:
        """A worker settles a claim it holds (``with_next``: and another held one's ack in
        the same batch)."""
        held = [d for d in self.deliveries if d.alive]
        picked = [held[n % len(held)]]
        if with_next and len(held) > 1:
            picked.append(held[(n + 1) % len(held)])
        self.settle_some(picked, action, detail)

    @precondition(lambda self: any(not d.alive for d in self.deliveries))
    @rule(n=st.integers(0, 200), action=st.sampled_from(ACTIONS))
    def late_settle(self, n: int, action: str) -> None:
        """The settle of a claim its worker no longer holds: its token is stale or about to
        be (a crashed or frozen worker's late ack, a settle retried after a lost reply)."""
        gone = [d for d in self.deliveries if not d.alive]
        self.settle_some([gone[n % len(gone)]], action, None)

    @precondition(lambda self: any(d.alive for d in self.deliveries))
    @rule(n=st.integers(0, 200))
    def task_starts(self, n: int) -> None:
        """A held delivery's task starts (it counts in its rate group's window by its start
        from now on)."""
        held = [d for d in self.deliveries if d.alive]
        d = held[n % len(held)]
        self.both("rate_started", lambda b, a: b.rate_started(d.job_id, d.token))

    @rule(worker=st.sampled_from(WORKERS))
    def heartbeat(self, worker: str) -> None:
        held = self.held(worker)
        verdicts = self.both("heartbeat", lambda b, a: b.heartbeat([(d.job_id, d.token)
                                                                   for d in held]))
        for d, verdict in zip(held, verdicts, strict=True):
            if verdict != "renewed":  # ended by its own run, or lost
                d.alive = False

    @rule(worker=st.sampled_from(WORKERS))
    def crash(self, worker: str) -> None:
        """The worker dies (or freezes): its claims are no longer renewed."""
        for d in self.held(worker):
            d.alive = False

    # -- time, recovery, maintenance ----------------------------------------------------
    def deadlines(self) -> list[tuple[int, bool]]:
        """(When, whether a hold) of what Redis keeps in keys with a TTL: unique holds, and
        a rate group's claims not started yet and starts (each counts until then)."""
        out = [(hold.deadline, True) for hold in self.model.store.holds.values()]
        for group in self.model.store.rates.values():
            out += [(at, False) for at in group.pending.values()]
            out += [(at + RATE_WINDOW_MS, False) for at in group.starts.values()]
        return out

    def advance_to(self, target: int) -> None:
        """Move the clock, never leaving what Redis keeps in a key with a TTL within
        GUARD_MS of its deadline (Redis expires keys by real time), nor a hold exactly at half
        a backstop from it (the stores renew holds lapsing within half a backstop, Redis
        inclusive of that bound, the others not)."""
        half = OPTIONS.backstop_ms // 2
        moved = True
        while moved:
            moved = False
            for deadline, hold in self.deadlines():
                if 0 <= deadline - target < GUARD_MS:
                    target, moved = deadline + 1, True
                elif hold and deadline - target == half:
                    target, moved = target + 1, True
        by = target - self.clock.now
        self.clock.now = target
        self.store.moved(by)

    @rule(step=st.sampled_from(STEPS))
    def time_passes(self, step: int) -> None:
        self.advance_to(self.clock.now + step)

    @rule(step=st.sampled_from((10_003, 20_011)))
    def time_passes_for_healthy_workers(self, step: int) -> None:
        """Live workers renew their claims, then time passes."""
        for worker in WORKERS:
            self.heartbeat(worker)
        self.advance_to(self.clock.now + step)

    @precondition(lambda self: any(j.state == "running" for j in self.model.store.jobs.values()))
    @rule()
    def recover(self) -> None:
        """Expired claims come back; the model breaks ties of equal deadlines as the store
        did (each store orders them its own way)."""
        theirs = _outcome(lambda: [(r.job_id, r.outcome) for r in self.store.backend.recover()])
        order = [job_id for job_id, _ in theirs] if isinstance(theirs, list) else None
        ours = [(r.job_id, r.outcome) for r in self.model.recover(order=order)]
        self.check("recover", theirs, ours)

    @rule()
    def maintain(self) -> None:
        self.store.unthrottle()
        self.model.store.maintenance_until = 0
        self.both("maintain", lambda b, a: b.maintain("maintainer"))

    # -- operators ------------------------------------------------------------------------
    @precondition(lambda self: bool(self.model.store.jobs))
    @rule(n=st.integers(0, len(JOBS) - 1),
          operation=st.sampled_from(("retry", "retry", "cancel", "discard")))
    def admin(self, n: int, operation: str) -> None:
        """An operator retries, cancels or discards one of the jobs."""
        jobs = self.model.store.jobs
        failed = sorted(i for i, j in jobs.items() if j.state == "failed")
        candidates = failed if failed and operation != "cancel" else sorted(jobs)
        job_id = candidates[n % len(candidates)]
        self.both(f"admin {operation}", lambda b, a: getattr(a, operation)(job_id))

    @rule(queue=st.sampled_from(QUEUES))
    def purge(self, queue: str) -> None:
        self.both("purge", lambda b, a: b.purge(queue))

    # -- what a user can observe ----------------------------------------------------------
    @invariant()
    def observed_the_same(self) -> None:
        self.check("what the store shows", self.snapshot(self.store.backend),
                   self.snapshot(self.model))

    @staticmethod
    def snapshot(backend: Backend) -> dict[str, Any]:
        jobs: dict[str, Any] = {}
        for job_id in JOBS:
            rec = inspector_for(backend).job(job_id)
            if rec is not None:
                rec = dict(rec, hist=json.loads(rec.get("hist") or "[]"))
                if rec["st"] == "running":
                    rec["lease"] = inspector_for(backend).lease_deadline(job_id)
            jobs[job_id] = rec
        return {
            "jobs": jobs, "holds": inspector_for(backend).holds(),
            "slots": {g: sorted(inspector_for(backend).slot_holders(g)) for g in GROUPS},
            "states": {s: sorted(inspector_for(backend).ids_in_state(s))
                       for s in ("scheduled", "blocked", "running", "completed", "failed")},
            "blocked groups": sorted(inspector_for(backend).blocked_groups()),
            "sizes": {q: backend.size(q) for q in QUEUES},
            "scheduled": [(j.job_id, j.due_ms) for j in backend.scheduled_jobs(QUEUES)],
            "stats": backend.stats(),
        }
