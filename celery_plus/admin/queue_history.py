"""Queue depth and wait over time, as the admin reads it: the samples the workers' maintenance
turns recorded (``stores/admin_base/queue_history.py``: one a minute, kept a day) over a
range, for one queue or all of them, ending with a sample the admin takes now (so the chart
reaches the present even while no worker runs).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from celery_plus.stores.admin_base.queue_history import RETENTION_MS, STEP_MS, decode, encode

#: The ranges the dashboard and the CLI offer: name -> seconds.
RANGES = {"1h": 3600, "6h": 21600, "24h": 86400}
DEFAULT_RANGE = "1h"


@dataclass(frozen=True)
class QueuePoint:
    """One sample: when, jobs enqueued (ready, not claimed) and how long the oldest of them
    had waited (None: none waited); ``live`` is the admin's own sample of now."""

    at_ms: int
    waiting: int
    oldest_wait_s: float | None
    live: bool = False


@dataclass(frozen=True)
class QueueHistory:
    """The samples of ``queue`` (None: every queue added up; the oldest wait of any) from
    ``since_ms`` on, oldest first; ``queues``: the queues seen in them."""

    queue: str | None
    since_ms: int
    now_ms: int
    step_s: int
    points: list[QueuePoint]
    queues: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {"queue": self.queue, "since_ms": self.since_ms, "now_ms": self.now_ms,
                "step_s": self.step_s, "queues": self.queues,
                "points": [asdict(p) for p in self.points]}


def _point(at_ms: int, queues: dict[str, tuple[int, int | None]], queue: str | None,
           live: bool) -> QueuePoint:
    chosen = [v for q, v in queues.items() if queue is None or q == queue]
    waiting = sum(n for n, _ in chosen)
    since = [at for _, at in chosen if at is not None]
    oldest = max(at_ms - min(since), 0) / 1000 if since else None
    return QueuePoint(at_ms, waiting, oldest, live)


def read_history(store: Any, queue: str | None = None, range_s: int = 3600) -> QueueHistory:
    """The history of ``queue`` over the last ``range_s`` seconds (at most a day) from
    ``store`` (an :class:`~celery_plus.model.admin.AdminStore`)."""
    if not 0 < range_s <= RETENTION_MS // 1000:
        raise ValueError(f"range: 1 to {RETENTION_MS // 1000} seconds (got {range_s})")
    if queue is not None and (not queue or len(queue) > 1000 or "\x00" in queue):
        raise ValueError("queue: a queue name (1 to 1000 characters, no NUL)")
    now = store.now_ms()
    since = now - range_s * 1000
    rows = store.history_rows(since - since % STEP_MS, now)
    seen: set[str] = set()
    points = []
    for _, at, sample in rows:
        queues = decode(sample)
        seen.update(queues)
        points.append(_point(at, queues, queue, False))
    live = decode(encode(store.queue_depth_rows()))
    seen.update(live)
    points.append(_point(now, live, queue, True))
    return QueueHistory(queue, since, now, STEP_MS // 1000, points, sorted(seen))


__all__ = ["DEFAULT_RANGE", "RANGES", "QueueHistory", "QueuePoint", "read_history"]
