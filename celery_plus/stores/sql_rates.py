"""The cluster rate groups' usage on the two SQL stores (``WorkerRecords.rate_usage``): their
claims (``rate_claims``), limits (a claimed job's ``rate_limit`` / ``rate_window_ms``) and
parked jobs, read in three bounded statements."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from celery_plus.model.store import RATE_GROUPS_MAX, RateUsage, rate_usage_of

#: Claims read at most (each group holds at most its limit of them).
CLAIMS_MAX = 100_000


def rate_usage(rows: Callable[[str, Sequence[Any]], list[Any]], now_ms: int, mark: str,
               true: str) -> list[RateUsage]:
    """``rows(sql, params)`` runs a statement; ``mark`` is the dialect's placeholder and
    ``true`` its true literal."""
    claims = rows(f"SELECT rate_group, started, at_ms, job_id FROM rate_claims LIMIT {mark}",
                  [CLAIMS_MAX])
    parked = {str(g): int(n) for g, n in rows(
        f"SELECT rate_group, count(*) FROM jobs WHERE state = 'blocked' AND rate_parked = {true} "
        f"GROUP BY rate_group LIMIT {mark}", [RATE_GROUPS_MAX])}
    sample: dict[str, str] = {}
    for group, _, _, job_id in claims:
        sample.setdefault(str(group), str(job_id))
    limits: dict[str, tuple[int, int]] = {}
    missing = [g for g in parked if g not in sample]
    if sample:
        ids = list(sample.values())[:RATE_GROUPS_MAX]
        marks = ", ".join([mark] * len(ids))
        for group, limit, window in rows(
                f"SELECT rate_group, rate_limit, rate_window_ms FROM jobs WHERE id IN ({marks})",
                ids):
            limits[str(group)] = (int(limit or 0), int(window or 0))
    for group in missing[:RATE_GROUPS_MAX]:
        found = rows(f"SELECT rate_limit, rate_window_ms FROM jobs WHERE rate_group = {mark} "
                     f"AND state = 'blocked' AND rate_parked = {true} LIMIT 1", [group])
        if found:
            limits[group] = (int(found[0][0] or 0), int(found[0][1] or 0))
    return rate_usage_of(now_ms, [(str(g), bool(s), int(at)) for g, s, at, _ in claims],
                         limits, parked)
