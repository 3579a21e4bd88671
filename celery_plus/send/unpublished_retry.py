"""A retry whose message could not be published: the delivery goes back, the job is kept.

Celery's ``Task.retry`` publishes the retry's message and, if that raises, raises
``Reject(exc, requeue=False)``: the delivery is rejected for good, which celery-plus
stores as a dead letter (``rejected``) and plain Celery drops. When the publish failed
because the broker or store could not be reached (Celery's send path raises kombu's
``OperationalError`` then), the job did nothing wrong: it asked to run again and the outage
stopped the asking. So that rejection becomes :class:`RetryNotPublished`, a ``Reject`` with
requeue: the delivery goes back to its queue (a ``requeue`` settle, stored once the store
answers again, or the lease's recovery if the worker goes away first), counted as a
delivery (the job's delivery limit still bounds it) and noted in the job's history with
the reason ``retry not published``. The job then runs again as the same attempt and asks
for its retry anew. A publish that failed for any other reason (a message that cannot be
encoded, a uniqueness refusal) keeps Celery's rejection: asking again would fail again.
"""

from __future__ import annotations

from typing import Any

from celery.exceptions import Reject
from kombu.exceptions import OperationalError

#: The reason a delivery given back this way has in the job's history.
REASON = "retry not published"


class RetryNotPublished(Reject):
    """The retry of a task could not be published (the broker or store was unreachable):
    its delivery is given back (``requeue``), not rejected."""

    def __init__(self, reason: Any = None, requeue: bool = True) -> None:
        super().__init__(reason, requeue)


def give_back_unpublished(reject: Reject) -> RetryNotPublished | None:
    """The give-back that replaces Celery's rejection of a retry whose publish met an
    outage (``reject.reason`` is the publish's error); None for any other rejection."""
    error = reject.reason
    if reject.requeue or not isinstance(error, OperationalError):
        return None
    return RetryNotPublished(f"{REASON}: {type(error).__name__}: {error}")
