"""A coordinated delivery whose claim is not certain when its task starts does not start.

The rule is the ``plus`` transport's (``leases/start_check.py``), applied to the claim the
gate took in the coordination store: the gate hands the task its claim's token
(``LEASE_HEADER``) and until when the claim is certainly its own
(:data:`COORDINATED_SURE_UNTIL`, a ``clock()`` time, the same in every process of the host);
this process's holdings may know a later time (solo, threads and green pools: the keeper
renewed it meanwhile). Past that time the store is asked (a heartbeat of that one claim,
which renews it). Lost, or a store that cannot answer: the task does not start, and the
delivery goes back to the broker (``Reject(requeue=True)``: the claim's settle is fenced if
another worker took the job over; its next delivery is claimed again, and waits while
another claim runs the job). Never ``Ignore`` here: acking a delivery whose claim was
recovered would finish a job that never ran (``Coordinator.finish_orphan``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from celery_plus.leases.start_check import Heartbeat, claim_lost_before_start
from celery_plus.leases.tokens import LEASE_HEADER, delivery_tag

if TYPE_CHECKING:
    from celery_plus.coordination.coordinator import Coordinator
    from celery_plus.model.store import Verdict

#: The request field of a coordinated delivery: until when its claim is certainly its own.
COORDINATED_SURE_UNTIL = "plus_coordinated_sure_until"


def coordinated_claim(request: Any) -> tuple[str, int, float] | None:
    """(job id, token, sure until) of a task request the gate admitted (None: another)."""
    sure_until = getattr(request, COORDINATED_SURE_UNTIL, None)
    token = getattr(request, LEASE_HEADER, None)
    job_id = getattr(request, "id", None)
    if not isinstance(sure_until, (int, float)) or not isinstance(token, int) or not job_id:
        return None
    return str(job_id), token, float(sure_until)


def claim_lost(app: Any, job_id: str, token: int, sure_until: float) -> bool:
    """True when the claim is lost; raises ``LeaseUnknown`` when the coordination store
    cannot say (see the module docstring)."""
    from celery_plus.coordination.coordinator import coordinator_for

    coordinator = coordinator_for(app)
    if coordinator is None:
        return False  # not coordinated (a client app): nothing to check against
    return claim_lost_before_start(delivery_tag(job_id, token), (job_id, token), sure_until,
                                   coordinator_heartbeat(coordinator), coordinator.holdings)


def coordination_heartbeat(app: Any) -> tuple[Heartbeat, float, float] | None:
    """The heartbeat of claims in ``app``'s coordination store, its interval
    (``plus_heartbeat_interval``, as the worker's coordination keeper renews) and the lease
    (``plus_visibility_timeout``); None when ``app`` is not in coordinated mode."""
    from celery_plus.coordination.coordinator import coordinator_for

    coordinator = coordinator_for(app)
    if coordinator is None:
        return None
    return (coordinator_heartbeat(coordinator), float(coordinator.config.heartbeat_interval),
            float(coordinator.config.visibility_timeout))


def coordinator_heartbeat(coordinator: Coordinator) -> Heartbeat:
    """The heartbeat of claims in ``coordinator``'s store (the process's own client)."""

    def heartbeat(claims: list[tuple[str, int]]) -> list[Verdict]:
        return coordinator.backend.heartbeat(claims)

    return heartbeat


__all__ = ["COORDINATED_SURE_UNTIL", "claim_lost", "coordinated_claim",
           "coordination_heartbeat"]
