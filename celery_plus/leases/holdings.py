"""What one process holds in one store: its claims, and the settles not yet stored.

A claim is held from the moment the store grants it until its settle has landed, or until the
store says its lease is gone (taken over after it expired). While it is held, the lease keeper
(``keeper.py``) renews it, whether Celery has the message yet or not (the rest of a solo
worker's batch), whether its task runs or waits (prefetch), and whether the settle is still on
its way (a store error keeps the settle here for the next try, and the lease alive meanwhile).

Holdings belong to the process and the store, not to a kombu connection: when Celery
reconnects after a connection error, the tasks still executing keep their claims (renewed by
the same keeper) and their acks land through whichever connection flushes next.

The coordination store's :class:`~celery_plus.coordination.coordinator.Coordinator` keeps its
claims by id (``Backend.claim_job``) in a Holdings of its own too (not in this module's
registry): the same ledger, verdicts and sure share, its claims only — it stores each settle
itself at once, so none is ever queued here (:meth:`Holdings.hold`, :meth:`Holdings.forget`).

Delivery tags are ``"<token>:<job id>"`` (``tokens.delivery_tag``); times are
:func:`~celery_plus.leases.keeper.clock` seconds (counts while a process is stopped or the
machine sleeps, and is the same in every process of the host, so a pool process can compare
a parent's stamp).
"""

from __future__ import annotations

import gc
import os
import time
import weakref
from collections import deque
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from queue import Empty, SimpleQueue
from typing import Any, NamedTuple

from celery_plus.leases.keeper import clock
from celery_plus.leases.tokens import delivery_tag
from celery_plus.model.store import NOT_STARTED, Claim, Settle, Verdict
from celery_plus.runtime.helper_threads import native_lock

#: A lease is taken as certainly still ours for this share of its length after the store
#: last confirmed it (the rest covers clock drift between this host and the store); past it
#: the claim is suspect: it may have been recovered (the one share, transport and
#: coordination store alike).
SURE_SHARE = 0.8
#: Least time between two garbage collections run for kept deliveries
#: (:meth:`Holdings.collect_kept`).
KEPT_COLLECT_EVERY_S = 2.0
#: The longest time between two of them while the kept deliveries stay (each collection that
#: freed none doubles the wait: a kept delivery still running, a long task, costs little).
KEPT_COLLECT_MAX_S = 60.0


@dataclass
class Held:
    """One claim of this process."""

    job_id: str
    token: int
    #: clock() before the store last confirmed the lease (the claim or a heartbeat).
    confirmed: float
    delivered: bool = False
    #: No longer this process's to renew: the store said its lease was lost, or that its own
    #: run ended it (a heartbeat's ``Verdict``).
    lost: bool = False
    #: The settle that ends the claim, once the consumer acked or rejected it.
    settle: Settle | None = None
    #: clock() when its task started (the worker's ``Request.on_accepted``); None: not yet,
    #: or not known.
    started: float | None = None


class Ends(NamedTuple):
    """The claims a heartbeat's answer found over (:meth:`Holdings.confirmed`)."""

    #: Lost: taken over, recovered, cancelled (announced, their tasks stopped).
    lost: list[tuple[str, int]]
    #: Ended by their own run: acked, or continued by a retry or ``Task.replace``.
    ended: list[tuple[str, int]]


class Holdings:
    """The claims and unsent settles of one process in one store (thread-safe)."""

    def __init__(self, lease_s: float) -> None:
        self.lease_s = lease_s
        self._lock = native_lock()
        self._held: dict[str, Held] = {}
        #: Settles waiting for a store call, oldest first (tags of ``_held``, or bare
        #: settles of claims this process never recorded).
        self._pending: deque[Settle] = deque()
        #: Called (outside the lock, in the settling thread) when a settle is queued: the
        #: lease keeper and the event loop store it at once instead of on their next turn.
        self._on_settle: list[Callable[[], None]] = []
        #: Event loops of this process storing its settles as they are queued
        #: (``event_loop.py``); while one runs, the lease keeper stores them on its own
        #: turns only, instead of racing the loop for each settle.
        self._loops = 0
        #: Tags of kept deliveries whose messages are gone (:meth:`keep`), put by their
        #: finalizers and applied under the lock by the next call that reads the claims.
        #: A finalizer runs wherever the garbage collector does, in any thread and at any
        #: allocation, also inside a section holding ``_lock``: it must take no lock
        #: (``SimpleQueue.put`` is reentrant), or that thread waits for itself for ever
        #: and the worker's event loop and lease keeper with it.
        self._gone: SimpleQueue[str] = SimpleQueue()
        #: Tags kept at a connection close (:meth:`keep`), and when the garbage collector
        #: was last run for them (:meth:`collect_kept`).
        self._kept: set[str] = set()
        self._collected_at = 0.0
        self._kept_at_collection = 0
        #: Collections since one last freed a kept delivery (each doubles the wait).
        self._fruitless_collections = 0

    def loop_started(self) -> None:
        with self._lock:
            self._loops += 1

    def loop_stopped(self) -> None:
        with self._lock:
            self._loops = max(self._loops - 1, 0)

    def loop_stores_settles(self) -> bool:
        return self._loops > 0

    def on_settle(self, callback: Callable[[], None]) -> None:
        with self._lock:
            self._on_settle.append(callback)

    def off_settle(self, callback: Callable[[], None]) -> None:
        with self._lock:
            if callback in self._on_settle:
                self._on_settle.remove(callback)

    # -- claims -----------------------------------------------------------------------
    def claimed(self, claims: Iterable[Claim], asked_at: float) -> None:
        """Record claims the store granted to a call made at ``asked_at``."""
        with self._lock:
            for claim in claims:
                self._held[delivery_tag(claim.job_id, claim.token)] = Held(
                    claim.job_id, claim.token, asked_at)

    def hold(self, job_id: str, token: int, asked_at: float) -> None:
        """Record one claim the store granted to a call made at ``asked_at`` (a claim by id,
        ``Backend.claim_job``)."""
        with self._lock:
            self._held[delivery_tag(job_id, token)] = Held(job_id, token, asked_at)

    def delivered(self, tag: str) -> None:
        with self._lock:
            held = self._held.get(tag)
            if held is not None:
                held.delivered = True

    def started(self, tag: str, at: float) -> None:
        """The task of delivery ``tag`` started at ``at`` (a :func:`clock` time); its next
        heartbeat or its settle carries the mark to the store."""
        with self._lock:
            held = self._held.get(tag)
            if held is not None and held.started is None:
                held.started = at

    def start_marks(self, pairs: Sequence[tuple[str, int]], now: float,
                    running: dict[str, float], reserved_known: bool
                    ) -> list[int | None]:
        """A heartbeat's start mark of each claim (``JobStore.heartbeat``): ms since its task
        started (its own mark, else ``running``: tag -> clock() start of the runs Celery
        reports here), :data:`NOT_STARTED` when ``reserved_known`` (this process is a
        Celery worker, which marks every start), else None (not known)."""
        out: list[int | None] = []
        with self._lock:
            for job_id, token in pairs:
                tag = delivery_tag(job_id, token)
                held = self._held.get(tag)
                at = held.started if held is not None else None
                if at is None:
                    at = running.get(tag)
                if at is not None:
                    out.append(max(round((now - at) * 1000), 0))
                else:
                    out.append(NOT_STARTED if reserved_known else None)
        return out

    def get(self, tag: str) -> Held | None:
        with self._lock:
            return self._held.get(tag)

    def is_lost(self, tag: str) -> bool:
        with self._lock:
            held = self._held.get(tag)
            return held is not None and held.lost

    def sure_until(self, tag: str) -> float | None:
        """Until when the lease of ``tag`` is certainly ours (None: not held here; ``-inf``:
        known lost here, which ``leases/start_check.py`` reads in the same look-up)."""
        with self._lock:
            return self._sure_until(self._held.get(tag))

    def forget(self, tag: str) -> float | None:
        """Drop a claim that will never be settled through here (lost before delivery, or
        settled straight in the store by its holder); returns until when its lease was
        certainly ours, as :meth:`sure_until` (a claim past it is suspect: it may have been
        recovered by now)."""
        with self._lock:
            return self._sure_until(self._held.pop(tag, None))

    def _sure_until(self, held: Held | None) -> float | None:
        if held is None:
            return None
        return float("-inf") if held.lost else held.confirmed + self.lease_s * SURE_SHARE

    def overdue(self, now: float) -> dict[str, float]:
        """The delivered claims whose runs may be going on (not settled, not lost) and whose
        leases are no longer certainly ours at ``now``: tag -> seconds since the store last
        confirmed them. Their runs must stop before the store's deadline
        (``leases/deadline.py``)."""
        with self._lock:
            return {tag: now - h.confirmed for tag, h in self._held.items()
                    if h.delivered and h.settle is None and not h.lost
                    and h.confirmed + self.lease_s * SURE_SHARE <= now}

    def sure_of_runs(self, tags: Iterable[str]) -> float:
        """The earliest time until which the claims ``tags`` (of runs going on here) are
        certainly ours (``inf``: none held here, settled or lost — a lost claim's run is
        stopped by the lease keeper as it learns it)."""
        with self._lock:
            return min((h.confirmed + self.lease_s * SURE_SHARE for t in tags
                        if (h := self._held.get(t)) is not None and h.settle is None
                        and not h.lost), default=float("inf"))

    def renewable(self) -> list[tuple[str, int]]:
        """(job id, token) of every claim to renew: held, not lost, settle not landed."""
        with self._lock:
            self._release_gone()
            return [(h.job_id, h.token) for h in self._held.values() if not h.lost]

    def confirmed(self, pairs: Sequence[tuple[str, int]], verdicts: Sequence[Verdict],
                  asked_at: float) -> Ends:
        """Apply a heartbeat's answer, one verdict per pair: renewed leases are confirmed at
        ``asked_at``; every other claim is over here (marked, never renewed again, its
        pending settle dropped: the store would fence it anyway), whether its own run ended
        it (``ended``: an ack that crossed the heartbeat, a retry or ``Task.replace``) or it
        was ``lost``. Returns the claims newly found over, lost apart from ended: nothing
        took the ended ones over, so they are neither announced lost nor stopped.

        One job may be held here under two tokens at once (a continuation claimed here while
        the run that published it has not settled yet): each claim has its own verdict.
        """
        if len(verdicts) != len(pairs):
            raise ValueError(f"{len(verdicts)} verdicts for {len(pairs)} claims")
        ends = Ends([], [])
        over: set[str] = set()
        with self._lock:
            for (job_id, token), verdict in zip(pairs, verdicts, strict=True):
                tag = delivery_tag(job_id, token)
                held = self._held.get(tag)
                if held is None:
                    continue
                if verdict == Verdict.RENEWED:
                    held.confirmed = max(held.confirmed, asked_at)
                    continue
                if held.lost:
                    continue
                held.lost = True
                over.add(tag)
                (ends.ended if verdict == Verdict.ENDED else ends.lost).append((job_id, token))
                if held.settle is not None:  # moot: the store fences it anyway
                    del self._held[tag]
            if over:
                self._pending = deque(s for s in self._pending
                                      if delivery_tag(s.job_id, s.token) not in over)
        return ends

    def mark_lost(self, tag: str) -> None:
        """The store said this claim is no longer ours (a check before its task started)."""
        with self._lock:
            held = self._held.get(tag)
            if held is not None:
                held.lost = True

    def keep(self, tag: str, message: Any) -> None:
        """Keep the claim of a delivery whose connection closed while its consumer still
        has ``message``: renewed until settled; released once nothing references
        ``message`` any more unsettled (the consumer dropped it)."""
        weakref.finalize(message, self._gone.put, tag)
        with self._lock:
            self._kept.add(tag)
            self._fruitless_collections = 0

    def kept_unsettled(self, tag: str) -> bool:
        """Whether ``tag`` is a delivery kept across a closed connection (:meth:`keep`) and
        not settled yet: its task may still fail, and the failure's details still count."""
        with self._lock:
            held = self._held.get(tag)
            return tag in self._kept and held is not None and held.settle is None

    def collect_kept(self, every_s: float = KEPT_COLLECT_EVERY_S) -> bool:
        """Run the garbage collector (at most every ``every_s``) while a kept delivery is
        still unsettled: the requests Celery drops at a reconnect reference their messages
        in cycles, which only a full collection frees, and a process that allocates little
        may not run one for minutes, its dropped deliveries claimed and renewed meanwhile,
        never run (seen under a Redis that refused writes for 3 s: 6 jobs held for good).
        True if it ran. The lease keeper calls it on its turns; each collection after which
        no kept delivery went doubles the wait, up to :data:`KEPT_COLLECT_MAX_S`."""
        now = time.monotonic()
        with self._lock:
            self._kept = {t for t in self._kept
                          if (h := self._held.get(t)) is not None and h.settle is None}
            if len(self._kept) < self._kept_at_collection:  # the last one freed some
                self._fruitless_collections = 0
            doublings = max(0, self._fruitless_collections - 1)
            wait = min(every_s * 2 ** doublings, KEPT_COLLECT_MAX_S)
            due = bool(self._kept) and now - self._collected_at >= wait
            if due:
                self._collected_at = now
                self._kept_at_collection = len(self._kept)
                self._fruitless_collections += 1
        if due:
            gc.collect()  # finalizers only queue tags (no lock): safe outside the lock
        return due

    def _release_gone(self) -> None:
        """Release the kept claims whose messages are gone unsettled (under ``_lock``)."""
        while True:
            try:
                tag = self._gone.get_nowait()
            except Empty:
                return
            held = self._held.get(tag)
            if held is None or held.settle is not None:
                continue
            if held.lost:
                del self._held[tag]
                continue
            held.settle = Settle(held.job_id, held.token, "release")
            self._pending.append(held.settle)

    def undelivered(self, tags: Iterable[str]) -> list[str]:
        """The tags among ``tags`` still held and never delivered."""
        with self._lock:
            return [t for t in tags if (h := self._held.get(t)) is not None and not h.delivered
                    and h.settle is None]

    # -- settles ----------------------------------------------------------------------
    def settle(self, job_id: str, token: int, action: str,
               detail: dict[str, Any] | None = None, deliveries: int | None = None) -> None:
        """Queue the end of a claim. A claim found lost needs no store call: it is
        forgotten (the store would fence the settle anyway)."""
        tag = delivery_tag(job_id, token)
        with self._lock:
            held = self._held.get(tag)
            run_ms = None
            if held is not None and held.started is not None:
                run_ms = max(round((clock() - held.started) * 1000), 0)
            settle = Settle(job_id, token, action, detail, run_ms=run_ms,
                            deliveries=deliveries)
            if held is not None:
                if held.settle is not None:
                    return  # settled once already (a second ack is a no-op)
                if held.lost:
                    del self._held[tag]
                    return
                held.settle = settle
            self._pending.append(settle)
            listeners = list(self._on_settle)
        for notify in listeners:
            notify()

    def take_settles(self) -> list[Settle]:
        """The settles to send now; give them back with :meth:`landed` or :meth:`failed`."""
        with self._lock:
            self._release_gone()
            out = list(self._pending)
            self._pending.clear()
            return out

    def landed(self, settles: Iterable[Settle]) -> None:
        """The store applied (or fenced) these settles: their claims are over."""
        with self._lock:
            for s in settles:
                tag = delivery_tag(s.job_id, s.token)
                held = self._held.get(tag)
                if held is not None and held.settle is s:
                    del self._held[tag]

    def failed(self, settles: Sequence[Settle]) -> None:
        """The store call failed: keep these settles, first in line for the next try."""
        if not settles:
            return
        with self._lock:
            self._pending.extendleft(reversed(settles))

    def has_settles(self) -> bool:
        with self._lock:
            self._release_gone()
            return bool(self._pending)

    def __len__(self) -> int:
        with self._lock:
            self._release_gone()
            return len(self._held) + len(self._pending)


_lock = native_lock()
_registry: dict[Hashable, Holdings] = {}


def holdings_for(store: Hashable, lease_s: float) -> Holdings:
    """The process's holdings in ``store`` (created on first use)."""
    with _lock:
        book = _registry.get(store)
        if book is None:
            book = _registry[store] = Holdings(lease_s)
        return book


def every() -> list[Holdings]:
    """The holdings of this process, one per store."""
    with _lock:
        return list(_registry.values())


def find(tag: str) -> Holdings | None:
    """The holdings of this process that hold ``tag`` (None: held by no store here)."""
    with _lock:
        books = list(_registry.values())
    return next((b for b in books if b.get(tag) is not None), None)


def _after_fork_in_child() -> None:
    """A forked child (a prefork pool process) holds nothing: its parent does."""
    global _lock
    _lock = native_lock()
    _registry.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)
