"""Rate-limit and concurrency usage per key (issue 28; docs/admin.md "Limits in use").

For each task with a concurrency limit or a cluster rate limit, its groups — one per key
value (``concurrency_key`` / ``rate_limit_key``: ``proj.report:42``), or one task-wide — with
what each uses now: **concurrency**: jobs running vs the limit, jobs blocked behind it;
**rate**: starts in the current window (and claims not started yet, which count too) vs the
limit, jobs parked because the window was full. Bounded: the ``top`` busiest keys of each
task, and how many more there are. From the store's status (concurrency groups) and its rate
windows (``Backend.rate_usage``): no scan of the jobs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from prometheus_client.core import GaugeMetricFamily, Metric

from celery_plus.admin.api import Admin, connect
from celery_plus.admin.group_labels import group_label, task_of
from celery_plus.model.store import RateUsage

#: Keys shown per task and kind by default.
TOP = 20
#: Most keys shown per task and kind.
TOP_MAX = 1000
KINDS = ("concurrency", "rate")


@dataclass(frozen=True)
class KeyUsage:
    """One group (a key's, or the task-wide one) and what it uses now."""

    group: str
    #: The key's value as the group names it ('' for a task-wide limit).
    key: str
    #: Concurrency: jobs running; rate: starts in the window plus claims not started yet.
    used: int
    limit: int
    #: Concurrency: jobs blocked behind the group; rate: jobs parked (window full).
    waiting: int
    #: Rate: starts in the window, claims not started yet, the window (ms).
    starts: int = 0
    pending: int = 0
    window_ms: int = 0

    @property
    def full(self) -> bool:
        return self.limit > 0 and self.used >= self.limit


@dataclass
class TaskLimits:
    """A task's groups of one kind: the ``top`` busiest, and how many there are in all."""

    task: str
    kind: str
    keys: list[KeyUsage] = field(default_factory=list)
    groups: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {"task": self.task, "kind": self.kind, "groups": self.groups,
                "keys": [{**asdict(k), "full": k.full} for k in self.keys]}


def _key(group: str) -> str:
    return group.partition(":")[2]


def limits(admin: Admin, top: int = TOP) -> list[TaskLimits]:
    """Every task's concurrency and rate groups in use, the ``top`` busiest of each (by use,
    then by waiting jobs), by task then kind."""
    if not 1 <= top <= TOP_MAX:
        raise ValueError(f"top must be between 1 and {TOP_MAX} (got {top})")
    found: dict[tuple[str, str], list[KeyUsage]] = defaultdict(list)
    for g in admin.status().groups:
        found[(task_of(g.group), "concurrency")].append(
            KeyUsage(g.group, _key(g.group), g.running, g.limit, g.blocked))
    for r in rate_usage(admin):
        found[(task_of(r.group), "rate")].append(
            KeyUsage(r.group, _key(r.group), r.starts + r.pending, r.limit, r.parked,
                     r.starts, r.pending, r.window_ms))
    out = []
    for (task, kind), keys in sorted(found.items()):
        keys.sort(key=lambda k: (-k.used, -k.waiting, k.group))
        out.append(TaskLimits(task, kind, keys[:top], len(keys)))
    return out


def rate_usage(admin: Admin) -> list[RateUsage]:
    """The store's rate windows (none for a store that keeps no rate limits)."""
    backend: Any = getattr(admin.store, "backend", None)
    usage = getattr(backend, "rate_usage", None)
    return list(usage()) if usage is not None else []


def list_limits(app: Any, top: int = TOP) -> list[TaskLimits]:
    """``admin.list_limits(app)``: :func:`limits` on the app's store, one call."""
    with connect(app) as admin:
        return limits(admin, top)


def limit_metrics(admin: Admin, key_labels: bool) -> Iterator[Metric]:
    """``/metrics``' rate-limit series (keyed groups added up per task unless
    ``key_labels``)."""
    starts: dict[str, int] = defaultdict(int)
    pending: dict[str, int] = defaultdict(int)
    parked: dict[str, int] = defaultdict(int)
    limit: dict[str, int] = {}
    window: dict[str, float] = {}
    for r in rate_usage(admin):
        label = group_label(r.group, key_labels)
        starts[label] += r.starts
        pending[label] += r.pending
        parked[label] += r.parked
        limit[label] = max(limit.get(label, 0), r.limit)
        window[label] = max(window.get(label, 0.0), r.window_ms / 1000)
    for name, doc, values in (
            ("celery_plus_rate_limit_starts", "Starts in a rate group's current window.",
             starts),
            ("celery_plus_rate_limit_pending", "Claims of a rate group not started yet "
             "(they count in its window).", pending),
            ("celery_plus_rate_limit_parked", "Jobs parked because a rate group's window was "
             "full.", parked),
            ("celery_plus_rate_limit_limit", "Starts a rate group allows per window (of each "
             "key's group for a keyed one).", limit),
            ("celery_plus_rate_limit_window_seconds", "A rate group's window.", window)):
        family = GaugeMetricFamily(name, doc, labels=["group"])
        for label in sorted(values):
            family.add_metric([label], values[label])
        yield family
