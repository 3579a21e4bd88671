"""The store's status as Prometheus metrics (text exposition format 0.0.4): ``/metrics``.

Gauges for what the store holds now (jobs by state and by queue, dead letters, the oldest
waiting job, concurrency groups) and counters for the store's cluster-wide event counts
(recoveries, dedups, dead letters, blocks). Rates (throughput) are left to Prometheus:
``rate(celery_plus_dead_lettered_total[5m])`` (see docs/admin.md).
"""

from __future__ import annotations

from typing import Any

from celery_plus.admin import api
from celery_plus.model.admin import STATES


def _metric_line(name: str, labels: dict[str, str], value: float) -> str:
    def esc(text: str) -> str:
        return text.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')

    number = str(value) if isinstance(value, int) else repr(float(value))
    inner = ",".join(f'{k}="{esc(v)}"' for k, v in labels.items())
    return f"{name}{{{inner}}} {number}" if inner else f"{name} {number}"


def metrics_text(admin: api.Admin) -> str:
    """The store's status in the Prometheus text exposition format (version 0.0.4)."""
    st = admin.status()
    out: list[str] = []

    def family(name: str, kind: str, doc: str, samples: list[tuple[dict[str, str], float]]
               ) -> None:
        out.extend([f"# HELP {name} {doc}", f"# TYPE {name} {kind}"])
        out.extend(_metric_line(name, labels, value) for labels, value in samples)

    family("celery_plus_jobs", "gauge", "Jobs in the store by state.",
           [({"state": s}, st.counts[s]) for s in STATES])
    family("celery_plus_queue_jobs", "gauge", "Jobs of a queue by state.",
           [({"queue": q.queue, "state": s}, getattr(q, s)) for q in st.queues
            for s in ("enqueued", "scheduled", "blocked", "running", "failed")])
    family("celery_plus_dead_letters", "gauge", "Dead letters (failed jobs) kept.",
           [({}, st.dead_letters)])
    family("celery_plus_oldest_waiting_seconds", "gauge",
           "Age of the longest-waiting ready job (0: none waits).",
           [({}, st.oldest_waiting_age_s or 0.0)])
    family("celery_plus_group_running", "gauge", "Slots in use of a concurrency group.",
           [({"group": g.group}, g.running) for g in st.groups])
    family("celery_plus_group_limit", "gauge", "Limit of a concurrency group.",
           [({"group": g.group}, g.limit) for g in st.groups])
    family("celery_plus_group_blocked", "gauge", "Jobs blocked behind a concurrency group.",
           [({"group": g.group}, g.blocked) for g in st.groups])
    backend: Any = getattr(admin.store, "backend", None)
    stats: dict[str, int] = dict(backend.stats()) if hasattr(backend, "stats") else {}
    for key, doc in (("recovered", "Deliveries recovered after an expired lease."),
                     ("deduplicated", "Publishes answered with the holder of a unique key."),
                     ("dead_lettered", "Jobs that became dead letters."),
                     ("blocked", "Jobs parked behind a full concurrency group.")):
        family(f"celery_plus_{key}_total", "counter", doc, [({}, stats.get(key, 0))])
    return "\n".join(out) + "\n"
