"""A claim its own run continued is not a lost lease.

A running task that publishes its own continuation — ``self.retry()``, ``Task.replace``, or
``self.retry(throw=False)`` followed by more work, as Celery allows — ends its claim in the
store: the job waits again under the message the run sent. The next heartbeat then finds the
claim gone, like a lease another worker took over; but nothing took it over, and Celery lets
that run end (or go on) by itself. So such a claim counts as *continued*, not lost: it is
never announced as lost and its run is never stopped.

The store says so in two ways: while the continuation waits, the job's token is still this
claim's and its delivery count is zero (a recovery would have left it above zero); and once
the continuation is claimed (here or elsewhere, under a new token), the job's history records
this claim's end as ``retried`` under its token. A replaced run is often still finishing in
its pool process when its replacement is claimed; taking it for a stale run then stopped that
process (``SIGTERM``), whatever it ran by then. As in Celery, a run that goes on after
``retry(throw=False)`` may overlap its own retry once the retry starts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from celery_plus.model.store import Records

#: The states of a job that waits for a worker.
WAITING = frozenset({"enqueued", "scheduled", "blocked"})


#: The history outcome of a claim its run continued (every store writes it so).
CONTINUED = "retried"


def ended_by_its_run(backend: Records, claim: tuple[str, int]) -> bool:
    """Whether the lease of ``claim`` (job id, token) ended because of its own run: the run
    continued it, or its ack landed (``completed`` under this token, for no other reason: a
    heartbeat can cross the ack on its way) — not lost to a recovery.

    The job's history decides where it names the claim: an attempt of this token that ended
    otherwise than continued (a recovery's ``lease expired``, ``delivery limit``…) means the
    claim was lost, whatever happened to the job since (a dead letter retried by an admin
    waits again under the same token, a coalesced job is ``completed``)."""
    record = backend.record(claim[0])
    if record is None:
        return False
    outcomes = {entry.get("outcome") for entry in record.history
                if isinstance(entry, dict) and entry.get("token") == claim[1]}
    if outcomes - {CONTINUED}:
        return False
    if CONTINUED in outcomes:
        return True
    return record.lease_token == claim[1] and (
        (record.state == "completed" and not record.reason)
        or (record.state in WAITING and record.deliveries == 0))
