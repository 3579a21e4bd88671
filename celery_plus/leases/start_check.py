"""A delivery whose lease was lost before its task starts must not start.

A worker frozen past its leases (``SIGSTOP``, a VM pause, a long GC) finds, once it runs
again, prefetched deliveries whose jobs were recovered meanwhile and now run elsewhere.
Starting one would run the job twice at once. So a task checks its delivery as it starts, in
the process that runs it (a prefork pool process, or the worker for the solo, threads and
gevent pools):

* a delivery this process knows is lost (the lease keeper's heartbeat said so) does not start;
* a lease confirmed by the store recently enough (the claim, or a heartbeat, less than
  ``SURE_SHARE`` of the lease ago) is certainly still ours: the task starts, no round trip;
* otherwise the store is asked (a heartbeat of that one claim, which also renews it): lost
  means do not start (a claim its own run ended, e.g. acked early, is not lost); a store
  that cannot answer means do not start either (fail closed: the lease may have lapsed and
  the job may run elsewhere already) — the delivery is given back instead
  (:class:`LeaseUnknown`), and the job runs once the store can say whose it is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from celery_plus.leases import holdings
from celery_plus.leases.keeper import clock
from celery_plus.leases.tokens import SURE_UNTIL, parse_delivery_tag
from celery_plus.model.store import Verdict

logger = logging.getLogger("celery_plus.transport")


class LeaseUnknown(Exception):
    """The store could not say whether a delivery's lease is still ours: do not start it,
    give it back."""


def lease_lost_before_start(app: Any, properties: dict[str, Any]) -> bool:
    """True when the delivery with these message ``properties`` must not start; raises
    :class:`LeaseUnknown` when the store cannot tell (the delivery is to be given back)."""
    tag = properties.get("delivery_tag")
    sure_until = properties.get(SURE_UNTIL)
    if not isinstance(tag, str) or not isinstance(sure_until, (int, float)):
        return False  # not a delivery of the plus transport
    parsed = parse_delivery_tag(tag)
    if parsed is None:
        return False
    return claim_lost_before_start(tag, parsed, sure_until, broker_heartbeat(app))


def claim_lost_before_start(tag: str, claim: tuple[str, int], sure_until: float,
                            heartbeat: Heartbeat,
                            book: holdings.Holdings | None = None) -> bool:
    """The rule for one claim (the ``plus`` transport's, or the coordination store's):
    ``sure_until`` as the delivery was handed over, or later as this process's holdings
    (``book``; by default those holding ``tag``) know it; past it the store is asked
    (``heartbeat`` of the one claim). True: lost; raises :class:`LeaseUnknown` when the store
    does not answer."""
    if book is None:
        book = holdings.find(tag)
    if book is not None:
        known = book.sure_until(tag)  # one look-up: -inf for a claim known lost here
        if known == float("-inf"):
            return True
        if known is not None:
            sure_until = max(sure_until, known)
    if clock() < sure_until:
        return False
    return asked_store(heartbeat, tag, claim, book)


#: Renews the given claims in their store, one verdict each (``JobStore.heartbeat``).
Heartbeat = Callable[[list[tuple[str, int]]], list[Verdict]]


def broker_heartbeat(app: Any) -> Heartbeat:
    """The heartbeat of claims in the store of ``app``'s ``plus`` transport (through a
    connection of the app's pool)."""

    def heartbeat(claims: list[tuple[str, int]]) -> list[Verdict]:
        with app.pool.acquire(block=True) as connection:
            verdicts: list[Verdict] = connection.default_channel.backend.heartbeat(claims)
            return verdicts

    return heartbeat


def asked_store(heartbeat: Heartbeat, tag: str, claim: tuple[str, int],
                book: holdings.Holdings | None) -> bool:
    """Whether the store says the lease of ``claim`` is lost (asking renews it); a claim its
    own run ended (continued or acked) is not: the heartbeat's verdict says which. Raises
    :class:`LeaseUnknown` when the store does not answer."""
    asked_at = clock()
    try:
        [verdict] = heartbeat([claim])
    except Exception as exc:
        raise LeaseUnknown(f"could not check the lease of job {claim[0]} before it starts "
                           f"({exc!r})") from exc
    if book is not None:
        if verdict == Verdict.RENEWED:
            book.confirmed([claim], [verdict], asked_at)
            sure = book.sure_until(tag)
            if sure is not None and sure <= clock():
                # The renewal counts from when it was sent: an answer that came after the
                # margin is no proof that the lease still holds (fail closed).
                raise LeaseUnknown(f"the store's answer on the lease of job {claim[0]} came "
                                   f"{clock() - asked_at:.1f} s after it was asked, past "
                                   "the lease's safety margin: not starting it")
        else:
            book.mark_lost(tag)
    return verdict == Verdict.LOST


def note_rate_start(app: Any, properties: dict[str, Any]) -> None:
    """Tell the store that the task of this delivery (a job of a cluster rate group) starts
    now: its claim counts by this start from here on (``Backend.rate_started``). A store
    that cannot be told is logged: the claim keeps counting, as not started, until its
    lease deadline — fewer starts than the limit allows meanwhile, never more."""
    tag = properties.get("delivery_tag")
    parsed = parse_delivery_tag(tag) if isinstance(tag, str) else None
    if parsed is None or SURE_UNTIL not in properties:
        return  # not a delivery of the plus transport
    try:
        with app.pool.acquire(block=True) as connection:
            connection.default_channel.backend.rate_started(*parsed)
    except Exception as exc:
        logger.warning("celery-plus: could not record the start of rate-limited job %s "
                       "(%r)", parsed[0], exc)
