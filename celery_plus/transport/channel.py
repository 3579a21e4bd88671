"""The kombu side of the ``plus`` transport, written once for every backend.

Task queues are durable: a published message becomes a job in the backend (how, and into
which transaction or batch: ``publishing.py``); consumers claim jobs in batches under a lease
and settle them (ack / reject / requeue) in batches, fenced by the lease token carried in the
delivery tag. Remote-control, reply, event and every other
queue declared transient are transient lists, with bindings that lapse unless their consumer
renews them (``transient.py``), as kombu's Redis transport keeps them. In a mixed deployment
(``plus_durable_queues``), the task queues not listed are *legacy* queues, which the channel's
:class:`~celery_plus.transport.bridge.LegacyBridge` routes to kombu's Redis layout.

A claimed job becomes a kombu message in one place (:meth:`Channel._message_of`), whether a
consumer is delivered it or ``basic_get`` fetched it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from queue import Empty
from typing import TYPE_CHECKING, Any

from kombu.exceptions import ConnectionError as KombuConnectionError
from kombu.transport import virtual
from kombu.transport.base import to_rabbitmq_queue_arguments
from kombu.utils.json import dumps

from celery_plus import signals
from celery_plus.leases.holdings import SURE_SHARE, Holdings
from celery_plus.leases.keeper import clock
from celery_plus.leases.settles import flush, report_outcomes
from celery_plus.leases.tokens import SURE_UNTIL, add_lease_header, delivery_tag, parse_delivery_tag
from celery_plus.model.store import Backend, Claim, ClaimResult
from celery_plus.runtime.helper_threads import native_lock
from celery_plus.runtime.worker_state import worker_running, worker_stopping
from celery_plus.transport import transient
from celery_plus.transport.bridge import LegacyBridge
from celery_plus.transport.envelopes import Unreadable, read_envelope, read_transient
from celery_plus.transport.failures import MALFORMED, failure_detail
from celery_plus.transport.publishing import job_from_message, write_job
from celery_plus.transport.rotation import rotate
from celery_plus.transport.transient import TransientQueues, named_transient

if TYPE_CHECKING:
    from celery_plus.transport.host import Host

logger = logging.getLogger("celery_plus.transport")

BINDING_SEP = "\x06\x16"

class ChannelClosed(KombuConnectionError):
    """A closed channel was used: recoverable, kombu's ``ensure`` revives the user on a new
    channel."""


def is_transient(queue: str) -> bool:
    """Remote-control, reply and event queues need no durability (by name; a channel also
    knows the queues declared transient: :meth:`Channel.is_transient`)."""
    return named_transient(queue)


def mark_redelivered(raw: dict[str, Any]) -> None:
    """Flag a message delivered again, where kombu's Redis transport flags a restored one
    (Celery's ``request.delivery_info['redelivered']`` reads it)."""
    raw["redelivered"] = True
    headers = raw.get("headers")
    if isinstance(headers, dict):
        headers["redelivered"] = True
    info = (raw.get("properties") or {}).get("delivery_info")
    if isinstance(info, dict):
        info["redelivered"] = True


class QoS(virtual.QoS):
    """Tracks this channel's deliveries; acks and rejects become fenced settles.

    The claims themselves, and the settles until they are stored, live in the process's
    :class:`~celery_plus.leases.holdings.Holdings` of the store, which outlive this channel
    (a reconnect keeps the claims of tasks still executing). Acks may come from other threads
    (pool result handlers), so state is guarded by a lock.
    """

    def __init__(self, channel: Channel, prefetch_count: int = 0) -> None:
        super().__init__(channel, prefetch_count)
        self._lock = native_lock()  # shared with the lease keeper, an OS thread
        self.holdings: Holdings = channel.connection.holdings
        self._failures: dict[str, dict[str, Any]] = {}

    def can_consume(self) -> bool:
        pcount = self.prefetch_count
        return not pcount or len(self._delivered) < pcount

    def can_consume_max_estimate(self) -> int:
        pcount = self.prefetch_count
        if not pcount:
            return 0
        return max(pcount - len(self._delivered), 0)

    def wants_refill(self) -> bool:
        """Whether to claim now: at least half of the prefetch window is free.

        Refilling by halves keeps half a window of jobs waiting in the worker while one
        claim brings the other half, instead of one claim (a store round trip) per freed
        slot; a window of one or two slots still refills slot by slot.
        """
        pcount = self.prefetch_count
        if not pcount:
            return True
        return pcount - len(self._delivered) >= max(pcount // 2, 1)

    def append(self, message: Any, delivery_tag: str) -> None:
        legacy = self.channel.bridge.take(message, delivery_tag)  # kombu's unacked hash
        with self._lock:
            self._delivered[delivery_tag] = message
        if not legacy:
            self.holdings.delivered(delivery_tag)

    def ack(self, delivery_tag: str) -> None:
        self._settle(delivery_tag, "ack")

    def reject(self, delivery_tag: str, requeue: bool = False) -> None:
        self._settle(delivery_tag, "requeue" if requeue else "reject")

    def mark_failure(self, delivery_tag: str, detail: dict[str, Any]) -> None:
        """Attach failure details to a delivery; its ack or reject dead-letters it.

        A delivery already settled (an early ack: ``acks_late=False``) keeps nothing. One
        whose connection closed while its task ran (a store outage: Celery reconnects, the
        claim is kept) keeps them: without them its task's failure would be settled as a
        success, a retry not published as a plain requeue.
        """
        kept = self.holdings.kept_unsettled(delivery_tag)
        with self._lock:
            if kept or delivery_tag in self._delivered:
                self._failures[delivery_tag] = detail

    def mark_started(self, delivery_tag: str, at: float) -> None:
        """The task of this delivery started at ``at`` (a lease keeper ``clock()`` time):
        its next heartbeat or its settle tells the store (no call of its own)."""
        self.holdings.started(delivery_tag, at)

    def _settle(self, delivery_tag: str, action: str) -> None:
        with self._lock:
            self._delivered.pop(delivery_tag, None)
            detail = self._failures.pop(delivery_tag, None)
        if self.channel.bridge.settle(delivery_tag, action):
            return  # a legacy delivery: settled the kombu way
        parsed = parse_delivery_tag(delivery_tag)
        if parsed is None:
            return
        if detail is not None and action in ("ack", "reject"):
            action = "fail"
        self.holdings.settle(parsed[0], parsed[1], action, detail)

    def restore_unacked(self) -> list[Any]:
        """Give back the claims of deliveries not settled when the channel closes.

        They are released (back to their queue, the delivery not counted), unless a worker
        that goes on closes the channel (Celery reconnecting after a connection error): then
        the claims stay, renewed by the lease keeper; the tasks Celery still runs ack them
        once they finish, and the deliveries it drops are released once their messages are
        gone (``Holdings.keep``).
        """
        with self._lock:
            delivered = list(self._delivered.items())
            self._delivered.clear()
        legacy = self.channel.bridge.give_back()  # back to their kombu lists
        keep = worker_running()
        for tag, message in delivered:
            parsed = parse_delivery_tag(tag)
            if parsed is None or tag in legacy:
                continue
            if keep:
                self.holdings.keep(tag, message)
            else:
                self.holdings.settle(parsed[0], parsed[1], "release")
        if keep and delivered:
            logger.warning("celery-plus: connection closed with %d unsettled deliveries: they "
                           "keep their claims while the worker still has them", len(delivered))
        self.channel.flush_settles()
        return []

    def restore_unacked_once(self, stderr: Any = None) -> None:
        self._on_collect.cancel()
        if getattr(self._delivered, "restored", False):
            return
        try:
            if self._delivered and self.restore_at_shutdown:
                self.restore_unacked()
            else:
                self.channel.flush_settles()
        except Exception as exc:  # the store may be down: the lease keeper tries again
            logger.warning("celery-plus: could not store settles on close (kept for the "
                           "lease keeper): %r", exc)
        finally:
            self._delivered.restored = True  # type: ignore[attr-defined]

    def restore_visible(self, *args: Any, **kwargs: Any) -> None:
        """Leases replace visibility-timeout scans: nothing to do here."""


class Message(virtual.Message):
    """A delivered message that dead-letters itself if its body cannot be decoded."""

    def decode(self) -> Any:
        try:
            return super().decode()
        except Exception as exc:
            qos = getattr(self.channel, "qos", None)
            if isinstance(qos, QoS):
                qos.mark_failure(
                    self.delivery_tag,
                    failure_detail(MALFORMED, exc, content_type=self.content_type),
                )
            raise


class Channel(virtual.Channel):
    """Virtual channel over a :class:`~celery_plus.model.store.Backend`."""

    QoS = QoS
    Message = Message
    supports_fanout = True
    do_restore = True
    connection: Host

    def __init__(self, connection: Host, **kwargs: Any) -> None:
        super().__init__(connection, **kwargs)
        self._queue_order: list[str] = []
        self.transient: TransientQueues = connection.transient
        #: Where legacy queues and bridged replies go (a mixed deployment).
        self.bridge = LegacyBridge(connection, self.is_transient)
        #: When the bindings of the transient queues consumed here are next renewed.
        self._renew_at = time.monotonic() + transient.MIN_TTL_MS / 3000
        self._renew_lock = native_lock()

    # -- durable, transient or legacy --------------------------------------------------
    def is_transient(self, queue: str) -> bool:
        """True for a queue whose messages are transient list items (``transient.py``)."""
        return self.transient.is_transient(queue)

    @property
    def open_transport(self) -> Host:
        """The open transport; a recoverable connection error once kombu closed this channel.

        After a connection error kombu's ``ensure`` closes every channel (``collect``), and a
        producer can still hold one (Celery's producer pool keeps it when the retries ran
        out). Raising a connection error lets the next ``ensure`` revive the producer on a
        new channel, where reading a closed channel's ``connection`` (None) would escape as
        an ``AttributeError``.
        """
        transport = self.connection
        if transport is None:
            raise ChannelClosed("celery-plus: this channel was closed after a connection "
                                "error; kombu reconnects and retries on a new one")
        return transport

    @property
    def state(self) -> Any:
        """kombu's broker state (exchanges, bindings) of the open transport."""
        return self.open_transport.state

    @property
    def backend(self) -> Backend:
        """The store, as the calling OS thread must use it (``Transport.backend``)."""
        return self.open_transport.backend

    def is_durable(self, queue: str) -> bool:
        """True for a queue stored in the durable store (the lean producer's check)."""
        return self.bridge.is_durable(queue)

    # -- publishing -------------------------------------------------------------------
    def _put(self, queue: str, message: dict[str, Any], **kwargs: Any) -> None:
        if self.is_transient(queue):
            self.backend.push_transient(queue, dumps(message))
            return
        if self.bridge.is_legacy(queue):
            self.bridge.put(queue, message)
            return
        config = self.open_transport.config
        write_job(self.backend, job_from_message(queue, message, config.max_deliveries,
                                                 round(config.rate_limit_margin * 1000)))

    def publish_direct(self, queue: str, message: dict[str, Any]) -> None:
        """Publish a prepared message straight to a durable queue (the lean send path)."""
        message["body"], encoding = self.encode_body(message["body"], self.body_encoding)
        props = message["properties"]
        props["body_encoding"] = encoding
        props["delivery_info"].update(exchange="", routing_key=queue)
        self._put(queue, message)

    def _put_fanout(self, exchange: str, message: dict[str, Any], routing_key: str,
                    **kwargs: Any) -> None:
        body = dumps(message)
        for binding in self.backend.bindings(exchange):
            self.backend.push_transient(binding.split(BINDING_SEP)[-1], body)
        self.bridge.put_fanout(exchange, message, routing_key)

    def prepare_queue_arguments(self, arguments: dict[str, Any], **kwargs: Any) -> Any:
        """``expires=`` and friends as ``x-expires`` etc., as kombu's Redis channel has them
        (a transient queue's bindings live twice its ``x-expires``)."""
        return to_rabbitmq_queue_arguments(arguments, **kwargs)

    def _new_queue(self, queue: str, **kwargs: Any) -> None:
        self.transient.declare(queue, **kwargs)
        self.bridge.declare(queue, **kwargs)

    def _queue_bind(self, exchange: str, routing_key: str, pattern: str, queue: str) -> None:
        self.backend.bind(exchange, BINDING_SEP.join((routing_key or "", pattern or "", queue)),
                          self.transient.binding_ttl_ms(queue))
        self.bridge.bind(exchange, routing_key, pattern, queue)

    def get_table(self, exchange: str) -> list[Any]:
        """The exchange's bindings, read from the store as kombu's Redis transport reads
        them: kombu's local table keeps the bindings of queues deleted since (a reply queue
        after its reply), and misses those other processes declared."""
        return [tuple(b.split(BINDING_SEP)) for b in self.backend.bindings(exchange)]

    def _delete(self, queue: str, *args: Any, **kwargs: Any) -> None:
        if args:
            exchange = args[0]
            routing_key, pattern = [*args[1:3], "", ""][:2]
            self.backend.unbind(
                exchange, BINDING_SEP.join((routing_key or "", pattern or "", queue)))
            self.bridge.unbind(queue, exchange, routing_key, pattern)
        if self.is_transient(queue):
            self._purge(queue)
            self.transient.forget(queue)

    def _queue_bindings(self, queue: str) -> list[tuple[str, str, Any]]:
        """(exchange, routing key, arguments) of the bindings this connection declared for
        ``queue`` (a copy: the lease keeper's thread reads it too)."""
        state = self.state
        keys = list(state.queue_index.get(queue, ()))
        return [(k.exchange, k.routing_key, state.bindings.get(k)) for k in keys]

    def _binding_members(self, queue: str) -> list[tuple[str, str]]:
        """(exchange, binding) of each binding this connection declared for ``queue``."""
        members = []
        for exchange, routing_key, arguments in self._queue_bindings(queue):
            key, pattern, _ = self.typeof(exchange).prepare_bind(
                queue, exchange, routing_key, arguments)
            members.append((exchange, BINDING_SEP.join((key or "", pattern or "", queue))))
        return members

    def _broadcast_bound(self, queue: str) -> bool:
        """True for a queue bound to a fanout or topic exchange (a subscriber)."""
        return any(self.typeof(exchange).type in ("fanout", "topic")
                   for exchange, _, _ in self._queue_bindings(queue))

    def _subscribe(self, queue: str) -> None:
        """Start consuming a transient queue. A subscriber of a broadcast hears what is sent
        from now on, as on Redis pub/sub: a command sent while a worker was down (into a list
        its binding still named) is dropped, never replayed to the worker that starts."""
        if self.is_transient(queue) and self._broadcast_bound(queue):
            self.backend.purge_transient(queue)

    def _unsubscribe(self, queue: str) -> None:
        """A consumer of an auto-delete transient queue is gone: its bindings go with it (AMQP
        deletes such a queue with its last consumer; kombu's Redis drops the subscription)."""
        if not (self.is_transient(queue) and self.transient.auto_delete(queue)):
            return
        for exchange, binding in self._binding_members(queue):
            self.backend.unbind(exchange, binding)

    def renew_transient(self) -> None:
        """Renew the bindings and marks of the transient queues consumed here, so they do
        not lapse while this process lives (throttled; called by the drain loop and, while a
        task blocks that loop, by the lease keeper)."""
        now = time.monotonic()
        if now < self._renew_at or not self._renew_lock.acquire(blocking=False):
            return
        try:
            lifetimes = [transient.MIN_TTL_MS]
            for queue in [q for q in list(self._active_queues) if self.is_transient(q)]:
                ttl = self.transient.binding_ttl_ms(queue)
                lifetimes.append(ttl)
                for exchange, binding in self._binding_members(queue):
                    self.backend.bind(exchange, binding, ttl)
                if self.transient.marked(queue):
                    self.transient.mark(queue, ttl)
            self._renew_at = now + min(lifetimes) / 3000
        finally:
            self._renew_lock.release()

    def _purge(self, queue: str) -> int:
        if self.is_transient(queue):
            return int(self.backend.purge_transient(queue))
        if self.bridge.is_legacy(queue):
            return self.bridge.purge(queue)
        return self.backend.purge(queue)

    def _size(self, queue: str) -> int:
        if self.is_transient(queue):
            return int(self.backend.transient_size(queue))
        if self.bridge.is_legacy(queue):
            return self.bridge.size(queue)
        return self.backend.size(queue)

    def _has_queue(self, queue: str, **kwargs: Any) -> bool:
        return True

    # -- consuming --------------------------------------------------------------------
    def basic_consume(self, queue: str, no_ack: bool, callback: Callable[[Any], Any],
                      consumer_tag: str, **kwargs: Any) -> str:
        super().basic_consume(queue, no_ack, callback, consumer_tag, **kwargs)

        def _callback(raw: dict[str, Any]) -> Any:
            return self._on_raw(raw, no_ack, callback, queue)

        self.open_transport._callbacks[queue] = _callback
        self._subscribe(queue)
        if self.is_durable(queue):
            self.open_transport.start_keeper()
        return consumer_tag

    def basic_cancel(self, consumer_tag: str) -> Any:
        queue = self._tag_to_queue.get(consumer_tag)
        result = super().basic_cancel(consumer_tag)
        if queue is not None and queue not in self._active_queues:
            self._unsubscribe(queue)
        return result

    def _on_raw(self, raw: dict[str, Any], no_ack: bool, callback: Callable[[Any], Any],
                queue: str = "") -> Any:
        tag = (raw.get("properties") or {}).get("delivery_tag")
        try:
            message = self.Message(raw, channel=self)
        except Exception as exc:
            if self.bridge.popped(tag):
                self.bridge.dead_letter(queue, dumps(raw), exc)
            else:
                self._dead_letter_now(tag, failure_detail(MALFORMED, exc))
            return None
        if no_ack:
            self._ack_on_delivery(message.delivery_tag)
        else:
            self.qos.append(message, message.delivery_tag)
            headers = raw.get("headers")
            if not isinstance(headers, dict) or "task" not in headers:
                self.qos.mark_failure(
                    message.delivery_tag,
                    failure_detail(MALFORMED, None, exc_message="message has no 'task' header"),
                )
        return callback(message)

    def _ack_on_delivery(self, tag: Any) -> None:
        """A no-ack consumer took a durable job: it is done as it is delivered."""
        parsed = parse_delivery_tag(tag) if isinstance(tag, str) else None
        if parsed is not None:
            self.qos.holdings.settle(parsed[0], parsed[1], "ack")

    def _settle_unreadable(self, tag: str, unreadable: Unreadable, deliveries: int) -> None:
        """A claimed job this release cannot read: given back after a back-off (settle
        ``defer``: scheduled ``rules.defer_ms(deliveries)`` ahead, a delivery counted, the
        jobs behind it claimed meanwhile) or a dead letter, with the reason
        (``envelopes.py``). Given back at most until its ``deliveries`` reach this worker's
        ``plus_max_deliveries``, whatever the job's own limit (none, for a job stored by
        ``push_raw``): never a loop between workers that cannot read it, never a hot one
        that spends its deliveries in milliseconds before a worker that reads it claims it.
        The give-back is logged once stored (``settles.report_outcomes``): the store makes
        it a dead letter instead at the job's own ``max_deliveries``, if that comes first."""
        if not unreadable.give_back \
                or deliveries >= self.open_transport.config.max_deliveries:
            self._dead_letter_now(tag, unreadable.detail)
            return
        parsed = parse_delivery_tag(tag)
        if parsed is not None:
            self.qos.holdings.settle(parsed[0], parsed[1], "defer", unreadable.detail,
                                     deliveries=deliveries)

    def _dead_letter_now(self, tag: Any, detail: dict[str, Any]) -> None:
        parsed = parse_delivery_tag(tag) if tag else None
        if parsed is not None:
            self.qos.holdings.settle(parsed[0], parsed[1], "fail", detail)
            logger.error("celery-plus: dead-lettered job %s: %s", parsed[0], detail)

    @property
    def durable_queues(self) -> list[str]:
        return [q for q in self._active_queues if self.is_durable(q)]

    def polls_kombu(self) -> bool:
        """True while this channel consumes kombu lists, which have no wake-ups."""
        return bool(self._consumers) and self.bridge.polls_kombu(list(self._active_queues))

    @property
    def transient_queues(self) -> list[str]:
        return [q for q in self._active_queues if self.is_transient(q)]

    def wants_jobs(self) -> bool:
        return bool(self._consumers) and self.qos.wants_refill() and bool(self.durable_queues)

    def drain_ready(self, transient: bool = True) -> tuple[int, int | None]:
        """Store the pending settles with a claim (or alone, if the prefetch window has no
        room), deliver the jobs claimed, then what transient queues hold (unless
        ``transient`` is false) and legacy queues. Returns how many messages were
        delivered, and how many jobs the claim brought (None: no claim was made)."""
        if not self._consumers:
            return 0, None
        self.renew_transient()
        claimed: int | None = None
        if self.wants_jobs():
            claimed = self._claim_and_deliver()
        else:
            self.flush_settles()
        delivered = claimed or 0
        if transient:
            delivered += self._deliver_transient()
        delivered += self.bridge.deliver(list(self._active_queues), self.qos.can_consume)
        return delivered, claimed

    def _deliver_transient(self) -> int:
        """Pop and deliver one message from each transient queue consumed here."""
        delivered = 0
        for queue in self.transient_queues:
            raw = self.backend.pop_transient(queue)
            if raw is None:
                raw = self.bridge.pop_reply(queue)  # a plain Celery worker's reply
            message = None if raw is None else read_transient(raw, queue)
            if message is not None:
                self.open_transport._deliver(message, queue)
                delivered += 1
        return delivered

    def _rotated_queues(self) -> list[str]:
        return rotate(self.durable_queues, self._queue_order)

    def _claim(self, queues: list[str], max_jobs: int) -> tuple[ClaimResult, float]:
        """Store the pending settles and claim up to ``max_jobs`` jobs, in one round trip.

        The settles stay pending if the call fails. A store that refuses the batch (not a
        connection error) gets the settles one by one first (``settles.flush``), so one bad
        settle never stops the worker claiming. Returns the result and when it was asked.
        """
        holdings = self.qos.holdings
        settles = holdings.take_settles()
        asked_at = clock()
        try:
            result = self.backend.claim(queues, self.open_transport.worker_id, max_jobs, settles)
        except self.open_transport.connection_errors:
            holdings.failed(settles)
            raise
        except Exception:
            if not settles:
                raise
            holdings.failed(settles)
            flush(self.backend, holdings, self.open_transport.connection_errors)  # reports
            settles, asked_at = [], clock()
            result = self.backend.claim(queues, self.open_transport.worker_id, max_jobs)
        else:
            holdings.landed(settles)
        holdings.claimed(result.claims, asked_at)
        report_outcomes(settles, result.dead_lettered)
        self.open_transport.note_next_due(result.next_due)
        return result, asked_at

    def _claim_and_deliver(self) -> int:
        result, asked_at = self._claim(self._rotated_queues(),
                                       self.qos.can_consume_max_estimate() or 10)
        for job_id in result.blocked:
            signals.task_concurrency_blocked.send(sender=None, task_id=job_id)
        tags = [delivery_tag(c.job_id, c.token) for c in result.claims]
        try:
            for claim in result.claims:
                if worker_stopping():
                    break
                self._deliver_claim(claim, asked_at)
        finally:
            # Claims never handed over (the worker stopping mid-batch, an error) go back.
            holdings = self.qos.holdings
            for tag in holdings.undelivered(tags):
                job_id, token = parse_delivery_tag(tag) or ("", 0)
                holdings.settle(job_id, token, "release")
        return len(result.claims)

    def _sure_until(self, asked_at: float) -> float:
        return asked_at + self.open_transport.config.visibility_timeout * SURE_SHARE

    def _deliver_claim(self, claim: Claim, asked_at: float) -> None:
        raw = self._message_of(claim, asked_at)
        if raw is not None:
            self.open_transport._deliver(raw, claim.queue)

    def _message_of(self, claim: Claim, asked_at: float) -> dict[str, Any] | None:
        """The kombu message of a claim granted to a call made at ``asked_at`` (a consumer's
        delivery and ``basic_get`` alike): tagged with the claim, its lease's sure-until
        time and token, flagged redelivered after a first delivery. None for a claim lost
        while it waited here (forgotten) or a message this release cannot read (settled
        with its reason, never raised: ``envelopes.py``).
        """
        tag = delivery_tag(claim.job_id, claim.token)
        holdings = self.qos.holdings
        if holdings.is_lost(tag):
            # Taken over while it waited here (a frozen worker): it runs elsewhere.
            holdings.forget(tag)
            logger.warning("celery-plus: job %s not started: its lease was lost before it "
                           "started (it runs elsewhere)", claim.job_id)
            return None
        try:
            raw = read_envelope(claim.message)
        except Unreadable as unreadable:
            self._settle_unreadable(tag, unreadable, claim.deliveries)
            return None
        props = raw["properties"]
        props["delivery_tag"] = tag
        props[SURE_UNTIL] = self._sure_until(asked_at)
        info = props.setdefault("delivery_info", {})
        if isinstance(info, dict):
            info.setdefault("routing_key", claim.queue)
            info.setdefault("exchange", "")
        if claim.deliveries > 1:
            mark_redelivered(raw)
        add_lease_header(raw, claim.token)
        return raw

    def flush_settles(self) -> None:
        """Store the settles pending in this process for the store (kept on failure)."""
        if self._qos is not None:
            flush(self.backend, self._qos.holdings, self.open_transport.connection_errors)

    def _get(self, queue: str, timeout: float | None = None) -> dict[str, Any]:
        if self.is_transient(queue):
            raw = self.backend.pop_transient(queue)
            message = None if raw is None else read_transient(raw, queue)
            if message is None:
                raise Empty()
            return message
        if self.bridge.is_legacy(queue):
            return self.bridge.get(queue)
        self.open_transport.start_keeper()  # the claim is renewed like a consumer's
        result, asked_at = self._claim([queue], 1)
        message = self._message_of(result.claims[0], asked_at) if result.claims else None
        if message is None:
            raise Empty()
        return message

    def basic_get(self, queue: str, no_ack: bool = False, **kwargs: Any) -> Any:
        try:
            message = super().basic_get(queue, no_ack, **kwargs)
        finally:
            self.bridge.got()
        if message is not None and no_ack and self.is_durable(queue):
            self._ack_on_delivery(message.delivery_tag)
            try:
                self.flush_settles()
            except Exception as exc:  # kept: the next call or the lease keeper stores it
                logger.warning("celery-plus: could not store a no-ack delivery's ack: %r", exc)
        return message

    def close(self) -> None:
        if not self.closed and self._qos is not None:
            try:
                self.flush_settles()
            except Exception as exc:
                logger.warning("celery-plus: could not flush settles on close: %r", exc)
        if not self.closed:
            for queue in list(self._active_queues):
                try:
                    self._unsubscribe(queue)
                except Exception as exc:  # the store may be gone: the bindings lapse
                    logger.debug("celery-plus: could not unbind %s on close: %r", queue, exc)
        super().close()
        self.bridge.close()
