"""Per task name: jobs waiting, running, succeeded, failed and dead, the failure rate and the
runtime's p50 / p95 over a recent window.

Read from bounded samples of what the store keeps, never a scan of every job (and nothing on
the worker's path: no counter is written per job): the newest :data:`SAMPLE` jobs of each
waiting state and of ``running``; the newest :data:`SAMPLE` jobs that completed, and that
became dead letters, within the window (their start and finish times give the runtimes); and,
per task seen (at most :data:`MAX_TASKS`), its dead letters now (one count each: Redis's
listing index, the SQL stores' capped count). A state with more jobs than the sample is
reported as sampled (:attr:`TaskBreakdown.sampled`), so a page never claims more than it read.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from celery_plus.model.admin import WAITING, Query, UnsupportedStore, percentile

#: Jobs read per state (the newest).
SAMPLE = 2000
#: Tasks whose dead letters are counted (the most active first).
MAX_TASKS = 100
#: The windows the dashboard offers: name -> seconds.
WINDOWS = {"15m": 900, "1h": 3600, "6h": 21600, "24h": 86400}


@dataclass
class TaskStats:
    """One task name's figures (see the module docstring for what each counts)."""

    name: str
    waiting: int = 0
    running: int = 0
    succeeded: int = 0
    failed: int = 0
    dead: int = 0
    #: failed / (succeeded + failed) in the window; None without either.
    failure_rate: float | None = None
    #: Runtime (finished - started) of the window's succeeded and failed jobs, ms.
    p50_ms: int | None = None
    p95_ms: int | None = None
    runtimes: list[int] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out.pop("runtimes")
        return {**out, "runtime_samples": len(self.runtimes)}


@dataclass(frozen=True)
class TaskBreakdown:
    """Every task seen, the busiest first; ``window_s`` the window of the finished jobs;
    ``sampled``: the states with more jobs than were read (their figures are of the newest
    ``sample`` only)."""

    tasks: list[TaskStats]
    window_s: int
    sample: int
    sampled: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"window_s": self.window_s, "sample": self.sample,
                "sampled": list(self.sampled), "tasks": [t.to_dict() for t in self.tasks]}


@dataclass(frozen=True)
class _Dead:
    counts: dict[str, int]
    #: Counted among the newest ``sample`` dead letters only.
    sampled: bool


def _dead_counts(store: Any, names: list[str], sample: int, newest: list[Any] | None) -> _Dead:
    """Each task's dead letters now: one count each from the store's index; while that index
    is still being built (Redis: a store an earlier release wrote, ``Walked.building``), the
    tasks of the newest ``sample`` dead letters instead, one read for all (a count each would
    walk the dead letters once per task); ``newest``: those rows if already read."""
    counts: dict[str, int] = {}
    page_walked = getattr(store, "page_walked", None)
    for name in names:
        if page_walked is None:
            counts[name] = int(store.page("failed", Query(task=name), 0, 1)[1])
            continue
        _, total, walked = page_walked("failed", Query(task=name, walk_limit=sample), 0, 1)
        if walked is not None and walked.building:
            if newest is None:
                newest = store.page("failed", Query(), 0, sample)[0]
            return _Dead({n: sum(1 for rec in newest if rec.name == n) for n in names}, True)
        counts[name] = int(total)
    return _Dead(counts, False)


def breakdown(admin: Any, window_s: int = 3600, sample: int = SAMPLE) -> TaskBreakdown:
    """The per-task breakdown (see the module docstring)."""
    if not 1 <= window_s <= 7 * 86400:
        raise ValueError(f"window: 1 s to 7 days (got {window_s} s)")
    if not 1 <= sample <= 10_000:
        raise ValueError(f"sample: 1 to 10000 jobs per state (got {sample})")
    store = admin.store
    if not hasattr(store, "page"):
        raise UnsupportedStore("this store's admin cannot list jobs for a breakdown")
    since = store.now_ms() - window_s * 1000
    per: dict[str, TaskStats] = {}
    sampled: list[str] = []
    # The window's newest failed rows, when they are the newest ``sample`` of all.
    newest_dead: list[Any] | None = None

    def stats(name: str) -> TaskStats:
        return per.setdefault(name, TaskStats(name))

    for state in (*WAITING, "running", "completed", "failed"):
        finished = state in ("completed", "failed")
        rows, total = store.page(state, Query(since_ms=since if finished else None), 0, sample)
        if total > len(rows):
            sampled.append(state)
        if state == "failed" and len(rows) >= sample:
            newest_dead = rows
        for rec in rows:
            entry = stats(rec.name)
            if state in WAITING:
                entry.waiting += 1
            elif state == "running":
                entry.running += 1
            else:
                if finished and state == "completed":
                    entry.succeeded += 1
                else:
                    entry.failed += 1
                if rec.started_ms and rec.finished_ms and rec.finished_ms >= rec.started_ms:
                    entry.runtimes.append(rec.finished_ms - rec.started_ms)
    busiest = sorted(per.values(), key=lambda t: (-(t.waiting + t.running + t.succeeded
                                                    + t.failed), t.name))
    dead = _dead_counts(store, [entry.name for entry in busiest[:MAX_TASKS]], sample,
                        newest_dead)
    if dead.sampled:
        sampled.append("dead")
    for entry in busiest[:MAX_TASKS]:
        entry.dead = dead.counts.get(entry.name, 0)
        done = entry.succeeded + entry.failed
        entry.failure_rate = entry.failed / done if done else None
        if entry.runtimes:
            entry.runtimes.sort()
            entry.p50_ms = percentile(entry.runtimes, 0.5)
            entry.p95_ms = percentile(entry.runtimes, 0.95)
    return TaskBreakdown(busiest, window_s, sample, tuple(sampled))
