"""A claimed job's stored message, read as a kombu envelope, or why this release cannot.

Every claim's message passes through :func:`read_envelope` before kombu sees it. What this
release cannot read raises :class:`Unreadable`, which the channel settles: it never raises out
of the transport (the worker would exit, and its supervisor's restart would claim the same job
again). Each case is a delivery: the claim counted it.

* no message (the store has none for the job: ``None`` or empty) → a dead letter, reason
  :data:`MISSING`;
* a stored format this release does not know: the message starts with a NUL byte, which no
  JSON envelope does (the mark of a layout, e.g. the Redis compact layout's ``\\0z1``, which
  the store inflates before this; a later release's mark stays as it is) → given back for a
  worker that reads it (settle ``defer``: scheduled after a back-off growing with its
  deliveries, ``rules.defer_ms``, so the jobs behind it run meanwhile and its deliveries last
  while a rolling upgrade brings up such a worker; reason :data:`UNKNOWN_FORMAT`); a dead
  letter with that reason once its deliveries reach the worker's ``plus_max_deliveries`` (or
  the job's own limit first: reason ``delivery limit``);
* anything else that is no kombu envelope (not JSON, not an object, without ``properties``,
  nested past Python's recursion limit) → a dead letter, reason ``malformed message``.

A transient message (remote control, replies, events: :func:`read_transient`) has no job to
settle: one that cannot be read is dropped with a warning.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from celery_plus.transport.failures import MALFORMED, failure_detail

logger = logging.getLogger("celery_plus.transport")

#: The reason of a claimed job whose message the store does not have.
MISSING = "message missing"
#: The reason a job in a format of another release goes back to its queue.
UNKNOWN_FORMAT = "unreadable by this release"


class Unreadable(Exception):
    """A claimed message this release cannot deliver: settle it with ``detail``, given back
    (``give_back``) if a worker of another release may read it, else as a dead letter."""

    def __init__(self, detail: dict[str, Any], give_back: bool = False) -> None:
        super().__init__(detail.get("exc_message") or detail["reason"])
        self.detail = detail
        self.give_back = give_back


def read_envelope(message: str | bytes | None) -> dict[str, Any]:
    """The kombu envelope ``message`` holds (see the module docstring for what raises)."""
    if not message:
        raise Unreadable(failure_detail(
            MISSING, exc_type="MessageMissing",
            exc_message="the job's message is missing from the store"))
    if message[:1] in (b"\x00", "\x00"):
        head = (message[:4].encode("utf-8", "backslashreplace") if isinstance(message, str)
                else bytes(message[:4]))
        raise Unreadable(failure_detail(
            UNKNOWN_FORMAT, exc_type="UnknownFormat",
            exc_message=f"the message is stored in a format this release does not read "
                        f"(it starts with {head!r}; a later release's layout?): it goes back "
                        "for a worker that reads it; upgrade this worker"), give_back=True)
    try:
        raw = json.loads(message)
        if not isinstance(raw, dict) or not isinstance(raw.get("properties"), dict):
            raise ValueError("not a kombu message envelope")
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise Unreadable(failure_detail(MALFORMED, exc)) from None
    return raw


def read_transient(raw: str | bytes, queue: str) -> dict[str, Any] | None:
    """The kombu envelope of a message popped from transient ``queue``; None (dropped, with
    a warning) if it is none."""
    try:
        return read_envelope(raw)
    except Unreadable as unreadable:
        logger.warning("celery-plus: dropped a message of transient queue %s that is no "
                       "kombu message (%s): %r", queue, unreadable, bytes(raw[:80])
                       if isinstance(raw, bytes) else raw[:80])
        return None
