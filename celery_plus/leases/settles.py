"""Storing settles: a process's queued acks, rejects and requeues, sent to the store in batches.

:func:`flush` sends what the process's holdings (``holdings.py``) have queued; whatever does
not land stays queued for the next try (by the channel's next claim, the event loop, or the
lease keeper: ``keeper.py``). A batch the store refuses is retried settle by settle, so one
bad settle holds back no other.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from celery_plus import signals
from celery_plus.model.rules import defer_ms
from celery_plus.model.store import Settle

if TYPE_CHECKING:
    from celery_plus.leases.holdings import Holdings
    from celery_plus.model.store import JobStore

logger = logging.getLogger("celery_plus.keeper")


def report_dead_letters(dead: Iterable[tuple[str, str]]) -> None:
    for job_id, reason in dead:
        logger.error("celery-plus: job %s dead-lettered (%s)", job_id, reason)
        signals.task_dead_lettered.send(sender=None, task_id=job_id, reason=reason)


def report_outcomes(landed: Sequence[Settle], dead: Sequence[tuple[str, str]]) -> None:
    """Say what the store did with settles that landed: the dead letters it made, and each
    job a ``defer`` gave back, logged only now (the job's own ``max_deliveries``, which the
    worker does not know, may have made it a dead letter instead)."""
    report_dead_letters(dead)
    gone = {job_id for job_id, _ in dead}
    for s in landed:
        if s.action == "defer" and s.job_id not in gone:
            detail = s.detail or {}
            wait = "" if s.deliveries is None else f" for {defer_ms(s.deliveries) / 1000:.0f} s"
            logger.warning("celery-plus: job %s given back%s (delivery %s): %s", s.job_id, wait,
                           s.deliveries, detail.get("exc_message") or detail.get("reason"))


def flush(backend: JobStore, holdings: Holdings,
          connection_errors: tuple[type[BaseException], ...] = ()) -> None:
    """Store the pending settles of ``holdings``; whatever does not land is kept for the
    next try (a settle batch is never dropped).

    A connection error keeps the whole batch. A store that refuses the batch (an error of
    the store call itself) gets each settle alone, so one bad settle holds back no other;
    one it refuses alone is tried once more with its failure details reduced to plain ASCII
    text, and kept (and logged) if even that fails.
    """
    settles = holdings.take_settles()
    if not settles:
        return
    try:
        dead = backend.settle(settles)
    except connection_errors:
        holdings.failed(settles)
        raise
    except Exception as exc:
        logger.warning("celery-plus: the store refused a batch of %d settles (%r); storing "
                       "them one by one", len(settles), exc)
        dead, landed = _settle_one_by_one(backend, holdings, settles, connection_errors)
        report_outcomes(landed, dead)
    else:
        holdings.landed(settles)
        report_outcomes(settles, dead)


def _settle_one_by_one(backend: JobStore, holdings: Holdings, settles: Sequence[Settle],
                       connection_errors: tuple[type[BaseException], ...]
                       ) -> tuple[list[tuple[str, str]], list[Settle]]:
    """Each settle alone: the dead letters made, and the settles that landed."""
    dead: list[tuple[str, str]] = []
    landed: list[Settle] = []
    refused: list[Settle] = []
    for index, settle in enumerate(settles):
        for attempt in (settle, plain_settle(settle)):
            try:
                dead += backend.settle([attempt])
            except connection_errors:
                holdings.failed([*refused, *settles[index:]])
                raise
            except Exception as exc:
                if attempt is not settle:
                    logger.error("celery-plus: the store refused the settle of job %s "
                                 "(%r); kept for the next try", settle.job_id, exc)
                    refused.append(settle)
                continue
            holdings.landed([settle])
            landed.append(settle)
            break
    holdings.failed(refused)
    return dead, landed


def plain_settle(settle: Settle) -> Settle:
    """``settle`` with its failure details as printable ASCII (no NUL, no lone surrogate)."""
    if not settle.detail:
        return settle
    detail = {str(key): _plain(value) for key, value in settle.detail.items()}
    return dataclasses.replace(settle, detail=detail)


def _plain(value: Any) -> Any:
    if isinstance(value, (bool, int, float)) or value is None:
        return value
    text = value if isinstance(value, str) else repr(value)
    return text.replace("\x00", "\\x00").encode("ascii", "backslashreplace").decode("ascii")
