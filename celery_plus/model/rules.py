"""The rulebook of the durable store, stated once.

For each event of a job's life (DESIGN.md §3.2-3.6) and each unique window, what happens to
the job's state, its unique hold, its concurrency slot, its lease token and its counters.
:data:`RULES` is the table a reader checks against DESIGN.md; the small functions below it
are the decisions the table refers to (when a publish is a continuation, when a lease has
expired, how long a hold lives ...). The in-process store (:mod:`celery_plus.stores.memory`)
is built from this module alone, and the model-based tests (``tests/fast/model``) hold Redis,
PostgreSQL and SQLite to it step by step.

Times are milliseconds of the store's clock. Windows (§2.2): ``pending`` — the key is held
while the job waits; ``running`` — until the job finishes; ``ttl`` — for the TTL from the
publish, whatever happens to the job (never released early, never extended).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum

# -- states and windows -------------------------------------------------------------------
#: States in which a job waits for a worker.
WAITING = ("enqueued", "scheduled", "blocked")
#: States of a job that has ended: a publish of its id starts it anew.
FINISHED = ("completed", "failed", "canceled", "discarded")
STATES = (*WAITING, "running", *FINISHED)
WINDOWS = ("pending", "running", "ttl")
#: Ordering: ``priority * PRIORITY_FACTOR + seq`` (lower first; equal priorities FIFO).
PRIORITY_FACTOR = 1 << 40
#: Attempts kept in a job's history.
HISTORY_MAX = 50
#: A job given back with a back-off (settle action ``defer``: a message this release cannot
#: read, for a worker of another release) waits this long after its first delivery, twice as
#: long after each next one, never longer than :data:`DEFER_MAX_MS` (:func:`defer_ms`).
DEFER_BASE_MS = 1000
DEFER_MAX_MS = 60_000

#: The constants above as the stores use them: written here only, and rendered into each
#: store's own language when it loads (the Redis Lua library: ``stores/redis/scripts.py``;
#: PostgreSQL functions of ``rules.sql``: ``stores/postgres/migrations.py``); the SQLite store
#: imports them. ``tests/fast/unit/test_rules_rendered.py`` keeps them from being retyped.
RENDERED: Mapping[str, int | tuple[str, ...]] = {
    "PRIORITY_FACTOR": PRIORITY_FACTOR,
    "HISTORY_MAX": HISTORY_MAX,
    "DEFER_BASE_MS": DEFER_BASE_MS,
    "DEFER_MAX_MS": DEFER_MAX_MS,
    "WAITING": WAITING,
    "FINISHED": FINISHED,
}


class Hold(Enum):
    """What an event does to the job's unique hold (only ever a hold the job itself has)."""

    KEEP = "keep"
    #: Taken for the job: pending/running windows until ``max(due, now) + backstop``
    #: (:func:`hold_deadline`); a ttl hold for its TTL, and only when the key is free. Held by
    #: another job: a *duplicate* — nothing is stored, the caller learns the holder.
    TAKE = "take"
    #: Dropped (a ttl hold never is).
    RELEASE = "release"
    #: Extended to ``now + backstop``.
    REFRESH = "refresh"
    #: Taken again until ``now + backstop``; held by another job meanwhile: this job
    #: *coalesces* into that one (``completed``, reason ``coalesced``).
    RETAKE = "retake"


class Slot(Enum):
    KEEP = "keep"
    #: Taken with the claim, atomically; a full group parks the job (``blocked``).
    TAKE = "take"
    #: Freed; the oldest job parked on the group goes back to its queue, keeping its place.
    FREE = "free"


class Lease(Enum):
    KEEP = "keep"
    #: A new token from the store-wide counter (:func:`next_token`); lease until
    #: ``now + lease_ms``.
    NEW = "new"
    #: Lease until ``now + lease_ms`` (the same token).
    RENEW = "renew"
    #: The claim ends: its token is no longer current (late settles, heartbeats and
    #: continuation messages that carry it change nothing).
    DROP = "drop"


class Count(Enum):
    """What an event does to the job's delivery counter."""

    KEEP = "keep"
    ADD = "+1"
    UNDO = "-1 (not below 0)"
    RESET = "0"


def _windows(pending: Hold, running: Hold, ttl: Hold) -> Mapping[str, Hold]:
    return {"pending": pending, "running": running, "ttl": ttl}


@dataclass(frozen=True)
class Rule:
    """One event: from which states, to which state, and its effects."""

    sources: tuple[str, ...]
    target: str
    hold: Mapping[str, Hold] = field(
        default_factory=lambda: _windows(Hold.KEEP, Hold.KEEP, Hold.KEEP))
    slot: Slot = Slot.KEEP
    lease: Lease = Lease.KEEP
    deliveries: Count = Count.KEEP
    #: Outcome of the attempt entry added to the job's history (None: no entry).
    history: str | None = None
    #: Cluster counter incremented (``Backend.stats``).
    stat: str | None = None
    note: str = ""


_FREE_ALL = _windows(Hold.RELEASE, Hold.RELEASE, Hold.KEEP)
_BACK_TO_WAIT = _windows(Hold.RETAKE, Hold.REFRESH, Hold.KEEP)

#: The event table: per event, the states it applies to, the state it leaves the job in, and
#: its effects (per window for the hold). Targets in words are decided as the note says.
RULES: Mapping[str, Rule] = {
    "publish": Rule(
        ("(none)", *WAITING, *FINISHED), "enqueued or scheduled (due > now)",
        hold=_windows(Hold.TAKE, Hold.TAKE, Hold.TAKE), deliveries=Count.RESET,
        note="new id: a record; waiting id: its message replaced (place in line anew); "
             "finished id: started anew (history kept). A key other than the job's old one "
             "releases the old key once the new one is decided (rekey)."),
    "publish (fenced)": Rule(
        ("(none)", *STATES), "(unchanged)",
        note="a running id without its claim's current token; any id with a token that is "
             "not current (a late or repeated continuation) unless that token's claim "
             "finished the job itself: nothing changes (publish_kind)"),
    "continuation": Rule(
        ("running",), "enqueued or scheduled (due > now)",
        hold=_windows(Hold.TAKE, Hold.TAKE, Hold.TAKE), slot=Slot.FREE, lease=Lease.DROP,
        deliveries=Count.RESET, history="retried",
        note="the message carries the running claim's current token: the claim ends and "
             "the new message takes the job's place; its key held by another job: the job "
             "coalesces (completed, reason coalesced) and releases its old key"),
    "claim": Rule(
        ("enqueued",), "running, or blocked (group full, or rate window full)",
        hold=_windows(Hold.RELEASE, Hold.REFRESH, Hold.KEEP), slot=Slot.TAKE,
        lease=Lease.NEW, deliveries=Count.ADD,
        note="by priority then FIFO, queues in the order asked; due scheduled jobs are "
             "promoted first"),
    "claim by id": Rule(
        WAITING, "running (full group: unchanged, outcome blocked)",
        hold=_windows(Hold.RELEASE, Hold.REFRESH, Hold.KEEP), slot=Slot.TAKE,
        lease=Lease.NEW, deliveries=Count.ADD,
        note="a scheduled job whether due or not (the coordination store's claim)"),
    "heartbeat": Rule(("running",), "running", lease=Lease.RENEW,
                      note="current token only (renewed); any other claim asked about is "
                           "reported ended by its own run or lost (heartbeat_verdict)"),
    "ack": Rule(("running",), "completed", hold=_FREE_ALL, slot=Slot.FREE, lease=Lease.DROP),
    "fail": Rule(("running",), "failed", hold=_FREE_ALL, slot=Slot.FREE, lease=Lease.DROP,
                 history="(reason, default 'task failed')", stat="dead_lettered"),
    "reject": Rule(("running",), "failed", hold=_FREE_ALL, slot=Slot.FREE, lease=Lease.DROP,
                   history="(reason, default 'rejected')", stat="dead_lettered"),
    "requeue": Rule(("running",), "enqueued", hold=_BACK_TO_WAIT, slot=Slot.FREE,
                    lease=Lease.DROP, history="(reason, default 'requeued')",
                    note="at the delivery limit: 'delivery limit' instead"),
    "defer": Rule(("running",), "scheduled", hold=_BACK_TO_WAIT, slot=Slot.FREE,
                  lease=Lease.DROP, history="(reason, default 'deferred')",
                  note="due now + defer_ms(deliveries): a give-back that is no hot loop (a "
                       "message this worker cannot read waits for one that can, while the "
                       "jobs behind it run); at the delivery limit: 'delivery limit' instead"),
    "release": Rule(("running",), "enqueued", hold=_BACK_TO_WAIT, slot=Slot.FREE,
                    lease=Lease.DROP, deliveries=Count.UNDO,
                    note="a delivery given back unstarted: not counted, no history entry"),
    "lease expiry": Rule(("running",), "enqueued", hold=_BACK_TO_WAIT, slot=Slot.FREE,
                         lease=Lease.DROP, history="lease expired", stat="recovered",
                         note="the STORED deadline passed (recover); at the delivery limit: "
                              "'delivery limit' instead (also counted as recovered)"),
    "delivery limit": Rule(("running",), "failed", hold=_FREE_ALL, slot=Slot.FREE,
                           lease=Lease.DROP, history="delivery limit", stat="dead_lettered",
                           note="requeue or lease expiry once deliveries >= max_deliveries > 0"),
    "coalesce": Rule(("running",), "completed", stat="deduplicated",
                     note="a RETAKE whose key another job took meanwhile (reason coalesced)"),
    "promote": Rule(("scheduled",), "enqueued", note="due <= now (claim, maintenance)"),
    "unblock": Rule(("blocked",), "enqueued",
                    note="a slot of its group freed (oldest first), or maintenance finds "
                         "free slots; the job keeps its score"),
    "admin retry": Rule(
        ("failed",), "enqueued", hold=_windows(Hold.TAKE, Hold.TAKE, Hold.TAKE),
        deliveries=Count.RESET, history="admin retry",
        note="pending/running hold until now + backstop; its key held by another job: a "
             "conflict, nothing changes; joins the back of its queue at its priority"),
    "admin cancel": Rule(WAITING, "canceled", hold=_FREE_ALL, history="admin cancel"),
    "admin discard": Rule(("failed",), "discarded", history="admin discard"),
    "purge": Rule(WAITING, "(deleted)", hold=_FREE_ALL,
                  note="the waiting jobs of one queue; running and finished ones stay"),
    "prune": Rule(FINISHED, "(deleted)",
                  note="maintenance: finished past retention age or beyond the count "
                       "bound, oldest first; a ttl hold outlives its record"),
    "rate park": Rule(
        ("enqueued",), "blocked",
        note="claim of a job of a rate group whose window is full (rate_room <= 0); it counts "
             "nothing and keeps its place in line"),
    "rate release": Rule(
        ("blocked",), "enqueued",
        note="claim or maintenance, once the window has room: that many parked jobs of the "
             "group, oldest first"),
    "task start": Rule(
        ("running",), "running",
        note="a claim of a rate group counts from the claim on: as not started until its "
             "first lease deadline (renewed by heartbeats), then by its start time"),
    "renew holds": Rule(
        (*WAITING, "running"), "(unchanged)",
        note="maintenance: a pending/running hold lapsing within half a backstop whose job "
             "still needs it (needs_hold) is extended to now + backstop"),
}

#: The settle actions (``Backend.settle``) and the rule each applies.
SETTLE_RULES = {"ack": "ack", "fail": "fail", "reject": "reject", "requeue": "requeue",
                "defer": "defer", "release": "release"}


# -- decisions ------------------------------------------------------------------------------
class PublishKind(Enum):
    STORE = "store"
    CONTINUE = "continue"
    FENCED = "fenced"


def publish_kind(state: str | None, token: int | None, continues: int) -> PublishKind:
    """What a publish does, given the job's state (None: no record) and last lease token
    and the lease token the message carries (``continues``, 0: none).

    A running job: continued only with its claim's current token, else fenced. A token for
    a job that is not running is fenced too (a late or repeated continuation), except that
    of the claim that finished the job itself (an early ack): the job is published anew.
    """
    current = continues > 0 and token == continues
    if state == "running":
        return PublishKind.CONTINUE if current else PublishKind.FENCED
    if continues > 0 and not (current and state in FINISHED):
        return PublishKind.FENCED
    return PublishKind.STORE


def publish_state(due_ms: int, now: int) -> str:
    """A stored message waits ``scheduled`` until due, else ``enqueued``."""
    return "scheduled" if due_ms > now else "enqueued"


def is_due(due_ms: int, now: int) -> bool:
    return due_ms <= now


def hold_deadline(due_ms: int, now: int, backstop_ms: int) -> int:
    """Until when a publish takes a pending/running hold: the due time plus the backstop."""
    return max(due_ms, now) + backstop_ms


def hold_is_live(deadline: int, now: int) -> bool:
    """A hold counts until and including its deadline."""
    return deadline >= now


def lease_expired(deadline: int, now: int) -> bool:
    """A lease is over at its deadline (recover takes it then)."""
    return deadline <= now


def at_delivery_limit(deliveries: int, max_deliveries: int) -> bool:
    return max_deliveries > 0 and deliveries >= max_deliveries


def defer_ms(deliveries: int) -> int:
    """How long a job given back by ``defer`` after its ``deliveries``-th delivery waits:
    :data:`DEFER_BASE_MS` doubled per delivery after the first, at most :data:`DEFER_MAX_MS`."""
    return min(DEFER_BASE_MS << min(max(deliveries - 1, 0), 30), DEFER_MAX_MS)


def score(priority: int, seq: int) -> int:
    """A job's place in its queue. ``seq`` is the store's next sequence number, taken once
    for each job a publish stores (new, replaced or continued; in a batch as alone) or an
    admin retry enqueues, and never for a duplicate, fenced or conflicting one."""
    return priority * PRIORITY_FACTOR + seq


def next_token(counter: int, last: int) -> int:
    """A claim's token: the store-wide counter's next value, above the job's last token, so
    a token never repeats for an id (nor for the store)."""
    return max(counter, last) + 1


def renew_due(deadline: int, now: int, backstop_ms: int) -> bool:
    """Maintenance renews a live hold lapsing within half a backstop."""
    return now <= deadline < now + backstop_ms // 2


def needs_hold(state: str, window: str, waiting_too: bool = True) -> bool:
    """Whether a job in ``state`` still needs its pending/running hold: a running job of
    the running window, and a waiting job (a coordination store, ``waiting_too`` False,
    renews running jobs' holds only: its waiting records wait for another broker)."""
    if window == "running" and state == "running":
        return True
    return waiting_too and window in ("pending", "running") and state in WAITING


def prunable(finished_ms: int, now: int, retention_ms: int) -> bool:
    return finished_ms <= now - retention_ms


def rate_start_counts(started_ms: int, now: int, window_ms: int) -> bool:
    """A start counts in its group's window for ``window_ms`` after it."""
    return started_ms >= now - window_ms


def rate_claim_counts(deadline: int, now: int) -> bool:
    """A claim not started yet counts until its lease deadline (heartbeats renew it while it
    counts; a lapsed one stays lapsed, whether or not the window dropped it yet)."""
    return deadline >= now


def rate_opens(starts: list[int], claims: list[int], window_ms: int, now: int) -> int:
    """When a rate group's window next has room: its oldest start leaves it (1 ms after
    the window), or its oldest claim not started yet lapses; now when it has neither."""
    times = [at + window_ms + 1 for at in starts] + claims
    return min(times) if times else now


#: What a heartbeat says of each claim asked about (``transport.backend.Verdict``).
RENEWED, ENDED, LOST = "renewed", "ended", "lost"
#: The history outcome of a claim its own run continued (the rule ``continuation``'s).
CONTINUED = "retried"


def heartbeat_verdict(token: int, state: str | None, current_token: int, deliveries: int,
                      reason: str, outcomes: Iterable[str]) -> str:
    """What became of claim ``token`` of a job, asked about by a heartbeat: the job's
    ``state`` (None: no record), the token of its last claim, its deliveries, its
    ``reason`` and the outcomes of its history entries made under ``token``.

    ``renewed``: the job runs under this claim (its lease is extended). ``ended``: the claim
    ended by its own run — its run continued it (a retry, ``Task.replace``: ``retried`` under
    its token, whether the continuation still waits or was claimed since), or its ack landed
    (completed under its token, for no other reason), or the job waits under its token with
    no delivery counted (released unstarted; a continuation recorded without its token by an
    earlier release); a heartbeat can cross any of them on its way. ``lost``: anything else — no
    record, recovered (``lease expired``, ``delivery limit``), taken over, cancelled, or any
    other end recorded under its token, whatever the job became since (coalesced as a
    duplicate, published again, retried from the dead letters).

    Known limits (docs/reliability.md, "Limits"): a claim its own worker gave back
    (``release``, ``requeue``) of a job delivered before is answered ``lost`` when the
    heartbeat crosses the give-back — the job waits under the claim's token with a delivery
    still counted, which this rule cannot tell from a recovery's; the worker then logs the
    lease as lost and sends ``task_lease_lost``, and stops nothing (its run has ended). And a
    history keeps its last :data:`HISTORY_MAX` entries only: a claim whose entry was pushed
    out is judged by the record alone."""
    if state == "running" and current_token == token:
        return RENEWED
    if state is None:
        return LOST
    under_token = set(outcomes)
    if under_token - {CONTINUED}:
        return LOST
    if CONTINUED in under_token:
        return ENDED
    if current_token == token and ((state == "completed" and not reason)
                                   or (state in WAITING and deliveries == 0)):
        return ENDED
    return LOST


def delivery_limit_message(deliveries: int, by_recovery: bool) -> str:
    if by_recovery:
        return f"message delivered {deliveries} times; last lease expired"
    return f"message delivered {deliveries} times without being settled"


def lease_expired_message(worker: str | None) -> str:
    return f"lease expired (claimed by {worker if worker is not None else '?'})"
