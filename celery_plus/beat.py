"""Cluster-wide periodic schedules: Celery beat with its entries, last runs and leader in the
store (docs/schedules.md).

:class:`Scheduler` is ``celery_plus.Celery``'s default ``beat_scheduler``, so ``celery-plus
beat -A proj`` and ``celery-plus worker -B`` use it. It reads Celery's own ``beat_schedule``
(Celery's schedule classes: intervals, ``crontab``, ``solar``) and Celery's beat service loop
runs it. On a plus store:

* every beat process registers the entries in the store (an entry keeps its stored last run
  when it is there already), and one of them leads: the holder of the store's ``beat`` role
  lease. With L = ``plus_beat_lease`` the store holds it for L/2 from each renewal, the leader
  renews it every L/6 and the others try for it every L/6, so a dead leader's successor fires
  within 2L/3 (and the store's round trip) of its death: the proof that no gap between two
  ticks exceeds L + one interval is in docs/schedules.md;
* the leader computes each entry's next tick from the *stored* last due time, with the entry's
  Celery schedule, and fires it with :meth:`Backend.schedule_fire`: the store advances the
  entry from that last due time and stores the tick's job (task id from the entry's name and
  the due time) in one atomic step — so two processes that both believe they lead still fire
  each tick once, and a restart neither skips nor repeats one;
* a tick overdue by at most ``plus_beat_catch_up_window`` is fired (each tick once, in order);
  older ones were missed by every beat process: ``plus_beat_catch_up`` ``once`` fires the
  entry once for all of them, ``skip`` fires none;
* a paused entry (the admin) passes its ticks without jobs.

On any other broker it is Celery's ``PersistentScheduler``, unchanged.

Another ``beat_scheduler`` (``--scheduler``; django-celery-beat's ``DatabaseScheduler``, a
scheduler of your own) keeps its own entries and has no leader: every beat process sends each
tick. On a plus store, :func:`fence_scheduler` (run as beat starts, by Celery's ``beat_init``
signal) puts the store's tick fence in front of its ``apply_async``: each tick it sends is
fired with :meth:`Backend.schedule_fire` from the entry's *stored* last due time, so however
many beat processes run, each tick is sent once (:class:`ForeignFence`). A scheduler that is
not a subclass of Celery's ``Scheduler`` cannot be fenced: a WARNING says so.
"""

from __future__ import annotations

import copy
import logging
import os
import socket
import time
import uuid
from datetime import datetime, timezone
from typing import Any

from celery import beat as celery_beat
from celery import schedules as celery_schedules
from celery import signals as celery_signals
from celery.utils.time import maybe_make_aware
from kombu.exceptions import EncodeError

from celery_plus.model.store import NewJob, PublishOutcome, ScheduleStore
from celery_plus.runtime.deferred_stop import stop_deferred

logger = logging.getLogger("celery_plus.beat")

#: The store's role lease the leading beat process holds.
ROLE = "beat"
#: Task ids of ticks: uuid5 of "<entry name>@<due ms>" in this namespace.
TICK_NAMESPACE = uuid.UUID("6f1c8f4e-5b2a-4d0e-9a51-3c1d7c9e2b10")
#: Message header naming the tick a job was published for: {"entry": name, "due_ms": ms}.
TICK_HEADER = "plus_beat"
#: Ticks one entry fires in one loop at most (then the loop comes back to it at once).
MAX_TICKS_PER_LOOP = 100
#: The store holds the role for this share of ``plus_beat_lease`` from each renewal ...
HOLD_SHARE = 1 / 2
#: ... the leader renews it, and every other beat process tries for it, this often.
TRY_SHARE = 1 / 6


def tick_id(name: str, due_ms: int) -> str:
    """The task id of entry ``name``'s tick due at ``due_ms``: the same in every process."""
    return str(uuid.uuid5(TICK_NAMESPACE, f"{name}@{due_ms}"))


def _at(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=timezone.utc)


def _ms(when: datetime) -> int:
    return round(when.timestamp() * 1000)


def due_after(schedule: Any, last_ms: int) -> int:
    """The due time (ms) of the tick after ``last_ms`` by a Celery schedule.

    Celery's schedules answer "how long until the next run after ``last_run_at``, from now";
    with the schedule's clock pinned to one instant, now + that is the next run itself, the
    same in every process for the same ``last_ms``. Always after ``last_ms``.
    """
    now = schedule.now()
    pinned = copy.copy(schedule)
    pinned.nowfun = lambda: now
    # The last tick in the schedule's clock's zone, as Celery beat's own last runs are:
    # before 5.7 Celery's crontab matched its fields in the zone of the datetime it is given.
    zone = getattr(schedule, "tz", None)
    last = _at(last_ms).astimezone(zone) if zone is not None else _at(last_ms)
    due = _ms(now + pinned.remaining_estimate(last))
    return max(due, last_ms + 1)


def latest_due(schedule: Any, last_ms: int, now_ms: int) -> int:
    """The latest tick due at or before ``now_ms`` after ``last_ms`` (``last_ms`` if none)."""
    if type(schedule) is celery_schedules.schedule and not schedule.relative:
        step = max(round(schedule.run_every.total_seconds() * 1000), 1)
        return last_ms + max((now_ms - last_ms) // step, 0) * step
    latest = last_ms
    for _ in range(1_000_000):
        due = due_after(schedule, latest)
        if due > now_ms:
            break
        latest = due
    return latest


class TickFence:
    """The publish of one tick, as the transport's ``current_transaction`` hands it over:
    the store fires the tick (fence, advance, publish) in one step."""

    def __init__(self, name: str, expected_ms: int, due_ms: int, next_ms: int) -> None:
        self.name = name
        self.expected_ms = expected_ms
        self.due_ms = due_ms
        self.next_ms = next_ms
        #: What the store did (``FIRE_OUTCOMES``); None while nothing reached the store.
        self.outcome: str | None = None
        #: The store was asked (an error after this is the store's, not the message's).
        self.asked = False

    def publish(self, backend: ScheduleStore, job: NewJob) -> PublishOutcome:
        self.asked = True
        self.outcome = backend.schedule_fire(self.name, self.expected_ms, self.due_ms,
                                             self.next_ms, job)
        if self.outcome == "fired":
            return PublishOutcome(True, job.id, state="enqueued")
        return PublishOutcome(False, job.id, holder_id=job.id, state=self.outcome, fenced=True)


def _describe(schedule: Any) -> str:
    text = repr(schedule)
    return text[:200]


class Scheduler(celery_beat.PersistentScheduler):
    """Celery's beat scheduler on the plus store (module docstring); Celery's
    ``PersistentScheduler`` on any other broker."""

    def __init__(self, app: Any, *args: Any, **kwargs: Any) -> None:
        self.clustered = _on_plus_store(app)
        self.backend: ScheduleStore | None = None
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.leading = False
        self._last: dict[str, int] = {}
        #: A tick came back ``stale``: re-read the entries (once) and the lease first.
        self._stale = False
        self._renewed_at = 0.0
        if self.clustered:
            config = app.plus_config()
            self.lease_s = config.beat_lease
            self.catch_up = config.beat_catch_up
            self.catch_up_window_ms = round(config.beat_catch_up_window * 1000)
        super().__init__(app, *args, **kwargs)

    # -- Celery's scheduler interface ----------------------------------------------------
    def setup_schedule(self) -> None:
        if not self.clustered:
            super().setup_schedule()
            return
        from celery_plus.stores.registry import open_store, store_location

        url, config = store_location(self.app)
        self.backend = open_store(url, config)
        self.install_default_entries(self.data)
        self.merge_inplace(self.app.conf.beat_schedule)
        self._register()
        logger.info("celery-plus beat %s: %d schedule entries in the store", self.holder,
                    len(self.data))

    @property
    def schedule(self) -> dict[str, Any]:
        return self.data if self.clustered else super().schedule

    @property
    def info(self) -> str:
        if not self.clustered:
            return str(super().info)
        return f"    . store -> entries, last runs and leader (lease {self.lease_s:g} s)"

    def tick(self, *args: Any, **kwargs: Any) -> float:
        if not self.clustered:
            return float(super().tick(*args, **kwargs))
        renew = self.lease_s * TRY_SHARE
        try:
            if not self._lead():
                return min(renew, self.max_interval)
            if self._stale:
                self._stale = False
                self._refresh()
            wait = float(self.max_interval)
            for name, entry in list(self.schedule.items()):
                wait = min(wait, self._run_entry(name, entry))
                if self._stale or not self._lead():  # a long loop still renews on time
                    return 0.0
        except Exception as exc:  # the store is down, or slow: try again soon
            logger.warning("celery-plus beat %s: the store failed (%r); trying again",
                           self.holder, exc)
            self.leading = False
            return min(1.0, renew)
        return max(min(wait, renew - (time.monotonic() - self._renewed_at)), 0.0)

    def sync(self) -> None:
        if not self.clustered:
            super().sync()

    def close(self) -> None:
        if not self.clustered:
            super().close()
            return
        if self.backend is not None:
            try:
                if self.leading:
                    self.backend.resign(ROLE, self.holder)  # another may lead at once
            except Exception as exc:
                logger.debug("celery-plus beat: resigning failed: %r", exc)
            self.backend.close()
            self.backend = None
        self.leading = False

    # -- leader and ticks -----------------------------------------------------------------
    def _store(self) -> ScheduleStore:
        if self.backend is None:
            raise RuntimeError("celery-plus beat: the scheduler is closed")
        return self.backend

    def _lead(self) -> bool:
        """Take or renew the role every ``TRY_SHARE`` of the lease; True while leading.

        The store holds it for ``HOLD_SHARE`` of the lease from the renewal, which began
        after ``started``: so this process believes it leads only while its lease is valid.
        """
        if self.leading and time.monotonic() - self._renewed_at < self.lease_s * TRY_SHARE:
            return True
        started = time.monotonic()
        leading = self._store().lead(ROLE, self.holder,
                                     round(self.lease_s * HOLD_SHARE * 1000))
        if leading != self.leading:
            logger.info("celery-plus beat %s %s", self.holder,
                        "leads: it fires the ticks" if leading else "follows: another leads")
            if leading:
                self._refresh()  # another leader may have fired ticks meanwhile
        self.leading = leading
        self._renewed_at = started
        return leading

    def _register(self) -> None:
        now_ms = _ms(self.app.now())
        for name, entry in self.schedule.items():
            record = self._store().schedule_register(name, now_ms, entry.task,
                                                     _describe(entry.schedule))
            self._last[name] = record.last_due_ms

    def _refresh(self) -> None:
        records = {r.name: r for r in self._store().schedules()}
        missing = [name for name in self.schedule if name not in records]
        self._last = {name: r.last_due_ms for name, r in records.items()}
        if missing:  # deleted from the admin while configured: registered anew
            self._register()

    def _run_entry(self, name: str, entry: Any) -> float:
        """Fire the entry's due ticks; seconds until its next one."""
        for _ in range(MAX_TICKS_PER_LOOP):
            if not self._lead():
                return 0.0
            last = self._last.get(name)
            if last is None:
                self._refresh()
                continue
            now_ms = _ms(self.app.now())
            due = due_after(entry.schedule, last)
            if due > now_ms:
                return (due - now_ms) / 1000
            publish = True
            if now_ms - due > self.catch_up_window_ms:
                # Missed by every beat process: one tick stands for all of them.
                due = latest_due(entry.schedule, last, now_ms)
                publish = self.catch_up == "once"
                logger.warning("celery-plus beat: %s missed its ticks since %s; catch-up "
                               "policy %r", name, _at(last).isoformat(), self.catch_up)
            with stop_deferred():  # a stop lands between ticks: each fired one is logged
                outcome = self._fire(name, entry, last, due, due_after(entry.schedule, due),
                                     publish)
            if outcome == "stale":
                # Another process fired it: ask the store whether this one still leads
                # before the next tick, and re-read the entries once then (not per entry).
                self._stale = True
                self._renewed_at = float("-inf")
                return 0.0
            if outcome == "missing":  # deleted from the admin: registered anew
                self._refresh()
            else:
                self._last[name] = due
        return 0.0

    def _fire(self, name: str, entry: Any, last: int, due: int, next_due: int,
              publish: bool) -> str:
        from celery_plus.transport.publishing import current_transaction

        fence = TickFence(name, last, due, next_due)
        if publish:
            tick = copy.copy(entry)
            tick.options = {**entry.options, "task_id": tick_id(name, due),
                            "headers": {**(entry.options.get("headers") or {}),
                                        TICK_HEADER: {"entry": name, "due_ms": due}}}
            token = current_transaction.set(fence)
            try:
                self.apply_async(tick, producer=self.producer, advance=False)
            except Exception as exc:
                if fence.asked or not _unsendable(exc):
                    raise  # the store's failure: tick() tries again
                # As Celery beat: the tick is lost, logged; the other entries go on.
                logger.error("celery-plus beat: %s's tick due %s could not be sent, skipped: "
                             "%s", name, _at(due).isoformat(), exc)
                publish = False
            finally:
                current_transaction.reset(token)
        if fence.outcome is None:
            # Skipped, or its queue is not a durable one (no fence there): advance alone.
            if publish:
                logger.warning("celery-plus beat: %s's tick went to a queue that is not "
                               "durable: it is not fenced against a second beat", name)
            fence.outcome = self._store().schedule_fire(name, last, due, next_due, None)
        if fence.outcome == "fired":
            logger.info("celery-plus beat: %s fired (%s, due %s)", name, entry.task,
                        _at(due).isoformat())
        return fence.outcome


def _unsendable(exc: BaseException) -> bool:
    """A tick whose message cannot be made: its arguments do not serialise, or a task
    option's key cannot be built from them (Celery's scheduler wraps the error)."""
    inner = exc.__context__ if isinstance(exc, celery_beat.SchedulingError) else exc
    return isinstance(inner, (EncodeError, TypeError, ValueError))


def _on_plus_store(app: Any) -> bool:
    conn = app.connection_for_read()
    try:
        return bool(conn.transport_cls == "plus")
    finally:
        conn.release()


# -- the fence in front of another scheduler ---------------------------------------------------
class ForeignFence:
    """The store's tick fence in front of a scheduler that is not celery-plus's.

    The scheduler decides when an entry is due and keeps its own entries and last runs; when it
    sends one, the fence reads the entry's last due time in the store (registering the entry,
    from the scheduler's own last run, when the store has none) and fires each tick due by the
    entry's schedule since then, in order, with the store's fence: the entry advances to the
    tick and the tick's job (task id :func:`tick_id`, header ``plus_beat``) is stored in one
    atomic step. Ticks overdue by more than ``plus_beat_catch_up_window`` follow
    ``plus_beat_catch_up``, as with celery-plus's scheduler. A tick another beat process fired
    already is not sent again (logged at INFO). An entry paused from celery-plus's admin sends
    nothing.
    """

    def __init__(self, scheduler: Any, send: Any) -> None:
        self.scheduler = scheduler
        self.app = scheduler.app
        self.send = send  # the scheduler's own apply_async, bound
        self.backend: ScheduleStore | None = None

    def _store(self) -> ScheduleStore:
        if self.backend is None:
            from celery_plus.stores.registry import open_store, store_location

            url, config = store_location(self.app)
            self.backend = open_store(url, config)
        return self.backend

    def close(self) -> None:
        if self.backend is not None:
            backend, self.backend = self.backend, None
            try:
                backend.close()
            except Exception as exc:
                logger.debug("celery-plus beat: closing the fence's store failed: %r", exc)

    def apply_async(self, entry: Any, producer: Any = None, advance: bool = True,
                    **kwargs: Any) -> Any:
        name = entry.name
        last_run = getattr(entry, "last_run_at", None)
        if advance:  # as Celery's apply_async: the scheduler's own state first
            entry = self.scheduler.reserve(entry)
        store = self._store()
        config = self.app.plus_config()
        window_ms = round(config.beat_catch_up_window * 1000)
        now_ms = _ms(self.app.now())
        since = _ms(maybe_make_aware(last_run)) if last_run is not None else now_ms
        last = store.schedule_register(name, since, entry.task,
                                       _describe(entry.schedule)).last_due_ms
        result = None
        fired = 0
        for _ in range(MAX_TICKS_PER_LOOP):  # each tick due since the stored one, in order
            due = due_after(entry.schedule, last)
            if due > now_ms:
                break
            publish = True
            if now_ms - due > window_ms:  # missed by every beat process: the policy
                due = latest_due(entry.schedule, last, now_ms)
                publish = config.beat_catch_up == "once"
                logger.warning("celery-plus beat: %s missed its ticks since %s; catch-up "
                               "policy %r", name, _at(last).isoformat(), config.beat_catch_up)
            with stop_deferred():  # a stop lands between ticks: each fired one is logged
                outcome, sent = self._fire(name, entry, last, due, producer, publish, kwargs)
            if outcome == "stale":  # another beat process fired it: it fires the rest
                break
            fired += 1
            result = sent if sent is not None else result
            last = due
        if not fired:
            logger.info("celery-plus beat: %s's tick was sent by another beat process "
                        "(the store's last tick: %s); not sent again", name,
                        _at(last).isoformat())
        return result

    def _fire(self, name: str, entry: Any, last: int, due: int, producer: Any,
              publish: bool, kwargs: dict[str, Any]) -> tuple[str, Any]:
        from celery_plus.transport.publishing import current_transaction

        store = self._store()
        next_due = due_after(entry.schedule, due)
        fence = TickFence(name, last, due, next_due)
        result = None
        if publish:
            options = getattr(entry, "options", None) or {}
            tick = _TickEntry(entry, {**options, "task_id": tick_id(name, due),
                                      "headers": {**(options.get("headers") or {}),
                                                  TICK_HEADER: {"entry": name,
                                                                "due_ms": due}}})
            token = current_transaction.set(fence)
            try:
                result = self.send(tick, producer=producer, advance=False, **kwargs)
            finally:
                current_transaction.reset(token)
            if fence.outcome is None:
                logger.warning("celery-plus beat: %s's tick went to a queue that is not "
                               "durable: it is not fenced against a second beat", name)
        if fence.outcome is None:
            fence.outcome = store.schedule_fire(name, last, due, next_due, None)
        if fence.outcome == "fired":
            logger.info("celery-plus beat: %s fired (%s, due %s)", name, entry.task,
                        _at(due).isoformat())
        elif fence.outcome != "stale":
            logger.info("celery-plus beat: %s's tick due %s not sent: %s", name,
                        _at(due).isoformat(), fence.outcome)
        return fence.outcome, result if fence.outcome == "fired" else None


class _TickEntry:
    """An entry as one tick sends it: the entry with the tick's options (its task id and
    header). Not a copy: an entry class need not copy (django-celery-beat's ``ModelEntry``
    cannot be)."""

    def __init__(self, entry: Any, options: dict[str, Any]) -> None:
        self._entry = entry
        self.options = options

    def __getattr__(self, name: str) -> Any:
        return getattr(self._entry, name)


def _qualname(obj: Any) -> str:
    cls = type(obj)
    return f"{cls.__module__}:{cls.__qualname__}"


def fence_scheduler(scheduler: Any) -> ForeignFence | None:
    """Put the store's tick fence in front of ``scheduler`` (a beat service's scheduler),
    if it is not celery-plus's and the broker is a plus store; the fence, or None.

    Logs a WARNING when the scheduler cannot be fenced (it is not a subclass of Celery's
    ``Scheduler``): every beat process running it then sends each tick.
    """
    if isinstance(scheduler, Scheduler) or isinstance(getattr(scheduler, "apply_async", None),
                                                      _Fenced):
        return None
    app = getattr(scheduler, "app", None)
    if app is None or not hasattr(app, "plus_config") or not _on_plus_store(app):
        return None
    name = _qualname(scheduler)
    if not isinstance(scheduler, celery_beat.Scheduler):
        logger.warning(
            "celery-plus beat: the beat scheduler %s is not celery-plus's and not a subclass "
            "of Celery's Scheduler: its ticks are not fenced, HA is off (two beat processes "
            "both send every tick). Run one beat process, or use celery-plus's scheduler "
            "(beat_scheduler = 'celery_plus.beat:Scheduler', the default) or a subclass of "
            "Celery's Scheduler (docs/schedules.md, 'Other schedulers')", name)
        return None
    fence = ForeignFence(scheduler, scheduler.apply_async)
    scheduler.apply_async = _Fenced(fence)
    close = scheduler.close

    def closed() -> None:
        try:
            close()
        finally:
            fence.close()

    scheduler.close = closed
    logger.warning(
        "celery-plus beat: the beat scheduler %s is not celery-plus's: its entries, last runs "
        "and timing are its own and every beat process runs it (no leader, no catch-up "
        "window); celery-plus fences the ticks it sends through the store, so each tick is "
        "sent once however many beat processes run (docs/schedules.md, 'Other schedulers')",
        name)
    return fence


class _Fenced:
    """A fenced scheduler's ``apply_async`` (the instance's, in front of its class's)."""

    def __init__(self, fence: ForeignFence) -> None:
        self.fence = fence

    def __call__(self, entry: Any, producer: Any = None, advance: bool = True,
                 **kwargs: Any) -> Any:
        return self.fence.apply_async(entry, producer, advance, **kwargs)


def _on_beat_init(sender: Any = None, **_: Any) -> None:
    scheduler = getattr(sender, "scheduler", None)
    if scheduler is None:
        return
    try:
        fence_scheduler(scheduler)
    except Exception as exc:  # never stop a beat: say what is off
        logger.warning("celery-plus beat: could not fence the beat scheduler %s (%r): HA is "
                       "off, two beat processes both send every tick", _qualname(scheduler),
                       exc)


def install() -> None:
    """Fence another ``beat_scheduler`` as beat starts (idempotent; ``celery_plus``'s import
    calls it, beside ``worker.install()``: importing this module connects nothing)."""
    celery_signals.beat_init.connect(_on_beat_init, weak=False,
                                     dispatch_uid="celery_plus.beat.fence_scheduler")
