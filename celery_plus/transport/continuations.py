"""A claim its own run continued is not a lost lease.

A running task that publishes its own continuation and goes on — ``self.retry(throw=False)``
followed by more work, as Celery allows — ends its claim in the store: the job waits again
under the message the run sent. The next heartbeat then finds the claim gone, like a lease
another worker took over; but nothing else runs the job, and Celery lets that run go on. So a
claim the store no longer renews counts as *continued*, not lost, while the job waits under a
message no worker has received yet and the token of its last claim is still this one (a
recovery would have left the job's delivery count above zero; another claim, a new token).
Once the continuation is claimed, the job runs elsewhere under a new token, and a run still
going here is a stale one again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .backend import Inspection

#: The states of a job that waits for a worker.
WAITING = frozenset({"enqueued", "scheduled", "blocked"})


def continued_by_its_run(backend: Inspection, claim: tuple[str, int]) -> bool:
    """Whether the lease of ``claim`` (job id, token) ended because its run continued it."""
    record = backend.record(claim[0])
    return (record is not None and record.state in WAITING
            and record.lease_token == claim[1] and record.deliveries == 0)
