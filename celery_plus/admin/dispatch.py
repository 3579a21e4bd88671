"""The dashboard's request threads, shared fairly (waitress's task dispatcher, replaced).

waitress hands whole requests to a fixed set of threads in arrival order, so a reader who
sends eight slow searches at once held all eight threads and an operator's page waited
behind them (67.6 s measured). Here each request is filed under its client — the role it
presents, its credential and its address (:func:`.server`'s ``classify``) — and:

* an operator's request is taken before any other, and while one has run for less than
  ``operator_first`` seconds no reader's or anonymous request starts: the operator's page
  shares the process (its GIL, its share of the CPU) with the requests already running only,
  not with a stream of new ones; a longer operator request (a bulk action) holds no one back
  after that, and a request that has waited half the ``deadline`` is no longer held back for
  operators (it still takes a shared thread in turn): operators whose requests overlap
  without a break would otherwise get every reader refused;
* the others may hold at most ``shared`` threads together (the rest are the operators'),
  and one client at most ``per_client`` of them; clients with requests waiting take turns;
* a request that waited ``deadline`` seconds for a thread is answered ``503`` with
  ``Retry-After`` at once instead of being run late, and one whose client has gone is
  dropped unrun (waitress's channel closes it).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Hashable
from typing import Any

logger = logging.getLogger("celery_plus.admin.dispatch")

#: The class of requests served first.
FIRST, SHARED = 0, 1
#: Seconds an operator's request holds back the start of others (module docstring).
OPERATOR_FIRST_S = 2.0
Classify = Callable[[Any], tuple[int, Hashable]]


class Busy:
    """The answer to a request that waited too long for a thread (a waitress request
    ``error``: its error task sends :meth:`to_response`)."""

    def __init__(self, body: str) -> None:
        self.body = body

    def to_response(self, ident: Any = None) -> tuple[str, list[tuple[str, str]], bytes]:
        return ("503 Service Unavailable", [("Content-Type", "text/plain; charset=utf-8"),
                                            ("Retry-After", "5")], self.body.encode())


class FairDispatcher:
    """A drop-in for waitress's ``ThreadedTaskDispatcher`` (see the module docstring).

    ``classify(channel)`` says which class (:data:`FIRST` or :data:`SHARED`) and which
    client a channel's next request belongs to."""

    def __init__(self, classify: Classify, shared: int, per_client: int,
                 deadline: float, operator_first: float = OPERATOR_FIRST_S) -> None:
        self.classify = classify
        self.shared, self.per_client, self.deadline = shared, per_client, deadline
        self.operator_first = operator_first
        #: Seconds a request held back for operators waits at most (then it starts).
        self.patience = deadline / 2
        #: When each operator's request being answered started, by the thread answering it.
        self.first_started: dict[threading.Thread, float] = {}
        self.lock = threading.Condition()
        #: Waiting channels by client, each with when it was filed; clients in turn order.
        self.waiting: dict[Hashable, deque[tuple[Any, float]]] = {}
        self.turns: tuple[deque[Hashable], deque[Hashable]] = (deque(), deque())
        self.running: Counter[Hashable] = Counter()
        self.shared_running = 0
        self.threads: set[threading.Thread] = set()
        self.wanted = 0

    # -- waitress's interface -------------------------------------------------------------
    def set_thread_count(self, count: int) -> None:
        with self.lock:
            self.wanted = count
            while len(self.threads) < count:
                thread = threading.Thread(target=self._work, daemon=True,
                                          name=f"celery-plus-admin-{len(self.threads)}")
                self.threads.add(thread)
                thread.start()
            self.lock.notify_all()

    def add_task(self, channel: Any) -> None:
        kind, client = self.classify(channel)
        with self.lock:
            queue = self.waiting.get(client)
            if queue is None:
                queue = self.waiting[client] = deque()
                self.turns[kind].append(client)
            queue.append((channel, time.monotonic()))
            self.lock.notify()

    def shutdown(self, cancel_pending: bool = True, timeout: float = 5) -> bool:
        self.set_thread_count(0)
        expiry = time.monotonic() + timeout
        with self.lock:
            while self.threads and time.monotonic() < expiry:
                self.lock.wait(0.1)
            if cancel_pending:
                for queue in self.waiting.values():
                    for channel, _ in queue:
                        channel.cancel()
                self.waiting.clear()
                for turns in self.turns:
                    turns.clear()
        return True

    # -- choosing -------------------------------------------------------------------------
    def _next(self, now: float) -> tuple[Any, Hashable, int | None] | None:
        """The next (channel, client, kind) to serve, taken off its queue (lock held); the
        kind is :data:`FIRST`, :data:`SHARED` (it takes one of the shared threads) or None (a
        request refused: it waited past the deadline)."""
        held_back = self._held_back_until() > now
        for kind, turns in enumerate(self.turns):
            for _ in range(len(turns)):
                client = turns[0]
                turns.rotate(-1)
                queue = self.waiting[client]
                waited = now - queue[0][1]
                expired = waited > self.deadline
                if kind == SHARED and not expired and (
                        (held_back and waited < self.patience)
                        or self.shared_running >= self.shared
                        or self.running[client] >= self.per_client):
                    continue
                channel, _ = queue.popleft()
                if not queue:
                    del self.waiting[client]
                    turns.remove(client)
                if expired:
                    self._refuse(channel)
                    return channel, client, None
                return channel, client, kind
        return None

    def _held_back_until(self) -> float:
        """Until when the operators' requests running hold others back (lock held)."""
        return max((started + self.operator_first for started in self.first_started.values()),
                   default=float("-inf"))

    def _wait_s(self, now: float) -> float:
        """How long an idle thread waits for a notify (lock held): until the operators'
        first seconds end or a request held back runs out of patience, at most a second (a
        waiting request's deadline passes meanwhile); ``now``: the time :meth:`_next` was
        given (read once: a patience running out between two reads would be missed)."""
        until = self._held_back_until()
        if until <= now:
            return 1.0
        # (a request whose patience ran out already waits for a thread a notify frees)
        patience_ends = [t + self.patience for c in self.turns[SHARED]
                         if (t := self.waiting[c][0][1]) + self.patience > now]
        return min(1.0, max(min([until, *patience_ends]) - now, 0.005))

    def _work(self) -> None:
        me = threading.current_thread()
        while True:
            with self.lock:
                picked = None
                while len(self.threads) <= self.wanted:
                    now = time.monotonic()
                    picked = self._next(now)
                    if picked is not None:
                        break
                    self.lock.wait(self._wait_s(now))
                if picked is None:
                    self.threads.discard(me)
                    self.lock.notify_all()
                    return
                channel, client, kind = picked
                counted = kind == SHARED
                if counted:
                    self.running[client] += 1
                    self.shared_running += 1
                elif kind == FIRST:
                    self.first_started[me] = time.monotonic()
            try:
                channel.service()
            except BaseException:
                logger.exception("celery-plus admin: serving %r failed", channel)
            finally:
                if kind is not None:
                    with self.lock:
                        if counted:
                            self.running[client] -= 1
                            if not self.running[client]:
                                del self.running[client]
                            self.shared_running -= 1
                        else:
                            del self.first_started[me]
                        self.lock.notify_all()

    @staticmethod
    def _refuse(channel: Any) -> None:
        """Make the channel's next answer a 503 (its request is not run)."""
        requests = getattr(channel, "requests", None)
        if requests:
            requests[0].error = Busy("the dashboard is busy: try again in a few seconds")
