"""The ``plus`` transport on Celery's event loop (kombu's hub), as kombu's Redis transport is.

A worker whose transport is asynchronous runs Celery's ``asynloop``: one thread polls file
descriptors (the prefork pool's pipes, the broker's sockets) and never blocks elsewhere, so
results from pool processes are acked the moment they arrive and remote control is answered
while every pool process is busy. The store's own wait is a blocking call (a Redis blocking
pop, a PostgreSQL ``LISTEN``, SQLite's wake-up socket), so :class:`LoopDriver` makes it
pollable:

* a :class:`Waiter` thread, with a store connection of its own, makes the same wait the
  synchronous ``drain_events`` makes and writes one byte to a pipe when it ends (work, a
  transient message, the timeout, or an error);
* the hub watches the pipe's read end; each turn of the loop (``hub.on_tick``) delivers what
  the wait brought, drains what is ready on the hub's thread, and arms the next wait only once
  a drain found nothing more (a store whose wake-ups do not consume anything never spins);
* a settle queued in any thread (a pool's result, a thread's ack) writes to the pipe too, so a
  freed prefetch slot is filled at once. The lease keeper stores the settles themselves
  (``keeper.py``) and stays the owner of heartbeats and maintenance;
* a settle queued while the prefetch window has no room to claim waits up to
  :data:`SETTLE_RIDE_S` for the claim that the next freed slots bring, and rides on it (one
  store call for both) instead of going alone (issue #29: a prefork worker sent most settles
  alone);
* while the wait in flight watches every transient queue (remote control), a drain does not
  pop them as well: the wait returns their next message (issue #29: those pops were a quarter
  of a prefork drain's store calls).
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from typing import TYPE_CHECKING, Any

from celery_plus.runtime.helper_threads import HelperThread, NativeEvent, native_lock
from celery_plus.runtime.worker_state import worker_stopping
from celery_plus.transport.envelopes import read_transient

if TYPE_CHECKING:
    from celery_plus.model.store import JobStore
    from celery_plus.transport.host import Host

logger = logging.getLogger("celery_plus.transport")

#: How long a queued settle may wait for a claim to carry it while no channel can claim. Well
#: inside the ack-to-durable target (10 ms at the median, docs/benchmarks.md).
SETTLE_RIDE_S = 0.005


class Pipe:
    """A self-pipe: any thread makes the read end readable; the hub drains it."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        for fd in (self.read_fd, self.write_fd):
            os.set_blocking(fd, False)
            os.set_inheritable(fd, False)
        self._lock = native_lock()
        self._closed = False

    def wake(self) -> None:
        with self._lock:  # a closed descriptor's number may be reused: never write to it
            if self._closed:
                return
            with contextlib.suppress(BlockingIOError):  # full: readable already
                os.write(self.write_fd, b"x")

    def drain(self) -> None:
        with contextlib.suppress(BlockingIOError, OSError):
            while os.read(self.read_fd, 4096):
                pass

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            os.close(self.read_fd)
            os.close(self.write_fd)


class Waiter(HelperThread):
    """Makes the store's blocking wait on its own connection, one wait per :meth:`arm`."""

    def __init__(self, new_backend: Any, pipe: Pipe) -> None:
        super().__init__(name="celery-plus-store-waiter", daemon=True)
        self._new_backend = new_backend
        self._pipe = pipe
        self._lock = native_lock()
        self._go = NativeEvent()
        self._stopping = False
        self._request: tuple[list[str], list[str], float] | None = None
        #: What the last wait brought: ("hit", the wait's answer) or ("error", exception).
        self._outcome: tuple[str, Any] | None = None
        self.armed = False

    def arm(self, durable: list[str], transient: list[str], timeout: float) -> None:
        with self._lock:
            self._request = (durable, transient, timeout)
            self.armed = True
        self._go.set()

    def take(self) -> tuple[str, Any] | None:
        """The outcome of the last wait, once it ended (None: still waiting, or not armed)."""
        with self._lock:
            outcome, self._outcome = self._outcome, None
            if outcome is not None:
                self.armed = False
            return outcome

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
        self._go.set()

    def run(self) -> None:
        backend: JobStore | None = None
        try:
            while True:
                self._go.wait()
                self._go.clear()
                with self._lock:
                    if self._stopping:
                        return
                    request, self._request = self._request, None
                if request is None:
                    continue
                try:
                    if backend is None:
                        backend = self._new_backend()
                        backend.connect()
                    outcome: tuple[str, Any] = ("hit", backend.wait(*request))
                except Exception as exc:
                    outcome = ("error", exc)
                    if backend is not None:
                        with contextlib.suppress(Exception):
                            backend.close()
                    backend = None
                with self._lock:
                    if self._stopping:
                        return
                    self._outcome = outcome
                self._pipe.wake()
        finally:
            if backend is not None:
                with contextlib.suppress(Exception):
                    backend.close()


class LoopDriver:
    """Runs one transport's consuming on one hub (see the module doc)."""

    def __init__(self, transport: Host, hub: Any) -> None:
        self.transport = transport
        self.hub = hub
        self.pipe = Pipe()
        self.waiter = Waiter(transport.new_backend, self.pipe)
        self._more = True  # drain on the first turn
        self._armed_busy = False
        #: The transient queues the wait in flight watches (while ``waiter.armed``).
        self._armed_transient: frozenset[str] = frozenset()
        #: With nothing to wait on in the store: when to look again (time.monotonic()).
        self._idle_until: float | None = None
        #: When this loop first saw the queued settles it holds back (time.monotonic()).
        self._settles_since: float | None = None
        self._stopped = False

    def start(self) -> None:
        self.waiter.start()
        self.hub.add_reader(self.pipe.read_fd, self._on_readable)
        self.hub.on_tick.add(self._on_tick)
        self.transport.holdings.on_settle(self.pipe.wake)
        self.transport.holdings.loop_started()

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        self.transport.holdings.off_settle(self.pipe.wake)
        self.transport.holdings.loop_stopped()
        self.hub.on_tick.discard(self._on_tick)
        with contextlib.suppress(Exception):  # the hub may have been reset or closed
            self.hub.remove_reader(self.pipe.read_fd)
        self.waiter.stop()
        self.pipe.close()

    def _on_readable(self) -> None:
        self.pipe.drain()

    def _on_tick(self) -> None:
        if self._stopped:
            return
        transport = self.transport
        outcome = self.waiter.take()
        if outcome is not None:
            self._armed_busy = False  # that wait is over
            kind, value = outcome
            if kind == "error":
                self._more = True  # after a reconnect, look again at once
                raise value
            if value is not None and value[0] == "transient" and value[2] is not None \
                    and (message := read_transient(value[2], value[1])) is not None:
                transport._deliver(message, value[1])
                # Deliver nothing more this turn: what its handler scheduled with call_soon
                # (add_consumer, cancel_consumer) runs first, at the start of the next turn,
                # as on kombu's Redis transport (one message per poll event).
                self._more = True
                self.pipe.wake()
                return
        idle_over = self._idle_until is not None and time.monotonic() >= self._idle_until
        # A prefetch slot freed while the wait in flight was armed for a full prefetch
        # (without the durable queues): fill it now rather than when that wait ends.
        freed = self._armed_busy and self.waiter.armed and self._has_capacity()
        # A settle queued (a pool's result acked): store it now, with a claim if there is
        # room, whatever the wait in flight is waiting for (the lease keeper leaves it to us).
        settles = transport.holdings.has_settles()
        due = outcome is not None or idle_over or freed
        more = self._more
        if settles and not due and self._settles_wait():
            # They ride on the next claim, or go alone when the wait is over. A look again
            # (``_more``) waits with them: with the window full it would store them alone.
            settles = more = False
        if due or more or settles:
            self._idle_until = None
            self._settles_since = None
            delivered = transport._drain_ready(self._transient_watched())
            self._more = delivered > 0
            if freed and not delivered:
                self._armed_busy = False  # nothing to fill it with: the next wait will see
            if self._more:
                self.pipe.wake()  # poll returns at once: the next turn drains again
                return
        if not self.waiter.armed and self._idle_until is None and not worker_stopping():
            self._arm()

    def _settles_wait(self) -> bool:
        """Whether the queued settles wait for a claim rather than go alone now: while no
        channel has room to claim, for at most :data:`SETTLE_RIDE_S` after this loop saw them
        (a timer ends the wait then)."""
        if self._has_capacity() or worker_stopping():
            return False
        if self._settles_since is None:
            since = self._settles_since = time.monotonic()
            self.hub.call_later(SETTLE_RIDE_S, self._settles_waited, since)
        return time.monotonic() - self._settles_since < SETTLE_RIDE_S

    def _settles_waited(self, since: float) -> None:
        """The timer of :meth:`_settles_wait`: the settles seen at ``since`` go now."""
        if self._settles_since == since:
            self._settles_since = float("-inf")
        self.pipe.wake()

    def _transient_watched(self) -> bool:
        """Whether the wait in flight watches every transient queue consumed now (a message
        pushed to one is then the wait's answer, delivered on the next turn)."""
        if not self.waiter.armed or not self._armed_transient:
            return False
        return all(q in self._armed_transient
                   for c in self.transport._live_channels() for q in c.transient_queues)

    def _has_capacity(self) -> bool:
        return any(c.wants_jobs() for c in self.transport._live_channels())

    def _arm(self) -> None:
        """Start the next wait, with the timeout the synchronous loop would use."""
        transport = self.transport
        durable, transient, wait, busy = transport._wait_plan(transport.config.poll_interval)
        self._armed_busy = busy
        if not durable and not transient:
            # Nothing to wait on in the store: look again later, as the synchronous loop sleeps.
            self._idle_until = time.monotonic() + wait
            self.hub.call_later(wait, self.pipe.wake)
            return
        self._armed_transient = frozenset(transient)
        self.waiter.arm(durable, transient, wait)

