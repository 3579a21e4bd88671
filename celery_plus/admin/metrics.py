"""``/metrics``: the store's state in the Prometheus text format, built by ``prometheus_client``
(docs/decisions.md) from a custom collector over the admin API — a registry per scrape, no
global state.

Gauges for what the store holds now (jobs by state and by queue, dead letters, the oldest
waiting job overall and per queue, concurrency groups, cluster rate limits), the workers (by
Celery node name: up, seconds since their last beat, jobs held), the wait from ready to start
per queue (median and 95th percentile over the last hour), and counters for the store's
cluster-wide event counts. Concurrency and rate-limit key values (customer ids) never become
label values unless ``plus_admin_metrics_key_labels`` (``group_labels.py``). Rates
(throughput) are left to Prometheus: ``rate(celery_plus_dead_lettered_total[5m])``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from celery_plus.admin import api, workers
from celery_plus.admin.group_labels import group_label
from celery_plus.model.admin import COUNTED, QUEUE_COUNTED

#: The content type of the exposition.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: Jobs the latency quantiles of a scrape are computed from (the newest; bounds a scrape).
METRICS_SAMPLES = 1000
#: Per-queue depth states.
COUNTERS = (("recovered", "Deliveries recovered after an expired lease."),
            ("deduplicated", "Publishes answered with the holder of a unique key."),
            ("dead_lettered", "Jobs that became dead letters."),
            ("blocked", "Jobs parked behind a full concurrency group."))


class AdminCollector(Collector):
    """The metric families of one scrape, read through ``admin``."""

    def __init__(self, admin: api.Admin, key_labels: bool = False) -> None:
        self.admin = admin
        self.key_labels = key_labels

    def collect(self) -> Iterator[Metric]:
        st = self.admin.status()
        yield from self._jobs(st)
        yield from self._groups(st.groups)
        yield from self._workers(st.now_ms)
        yield from self._latency()
        yield from self._counters()
        yield from self._extra()

    def _extra(self) -> Iterator[Metric]:
        """Families added by other modules (rate-limit usage: ``limits.py``)."""
        from celery_plus.admin.limits import limit_metrics

        yield from limit_metrics(self.admin, self.key_labels)

    def _jobs(self, st: Any) -> Iterator[Metric]:
        jobs = GaugeMetricFamily("celery_plus_jobs", "Jobs in the store by state.",
                                 labels=["state"])
        for state in COUNTED:
            jobs.add_metric([state], st.counts[state])
        yield jobs
        per_queue = GaugeMetricFamily("celery_plus_queue_jobs", "Jobs of a queue by state.",
                                      labels=["queue", "state"])
        age = GaugeMetricFamily("celery_plus_queue_oldest_waiting_seconds",
                                "Age of a queue's longest-waiting ready job (0: none waits).",
                                labels=["queue"])
        for q in st.queues:
            for state in QUEUE_COUNTED:
                per_queue.add_metric([q.queue, state], getattr(q, state))
            waited = 0.0 if q.oldest_waiting_ms is None else max(
                st.now_ms - q.oldest_waiting_ms, 0) / 1000
            age.add_metric([q.queue], waited)
        yield per_queue
        yield age
        yield GaugeMetricFamily("celery_plus_dead_letters", "Dead letters (failed jobs) kept.",
                                value=st.dead_letters)
        yield GaugeMetricFamily("celery_plus_oldest_waiting_seconds",
                                "Age of the longest-waiting ready job (0: none waits).",
                                value=st.oldest_waiting_age_s or 0.0)

    def _groups(self, groups: Any) -> Iterator[Metric]:
        running: dict[str, int] = defaultdict(int)
        blocked: dict[str, int] = defaultdict(int)
        limit: dict[str, int] = {}
        for g in groups:
            label = group_label(g.group, self.key_labels)
            running[label] += g.running
            blocked[label] += g.blocked
            limit[label] = max(limit.get(label, 0), g.limit)
        for name, doc, values in (
                ("celery_plus_group_running", "Slots in use of a concurrency group (keyed "
                 "groups added up per task unless plus_admin_metrics_key_labels).", running),
                ("celery_plus_group_limit", "Limit of a concurrency group (of each key's "
                 "group for a keyed one).", limit),
                ("celery_plus_group_blocked", "Jobs blocked behind a concurrency group.",
                 blocked)):
            family = GaugeMetricFamily(name, doc, labels=["group"])
            for label in sorted(values):
                family.add_metric([label], values[label])
            yield family

    def _workers(self, now_ms: int) -> Iterator[Metric]:
        up = GaugeMetricFamily("celery_plus_worker_up", "1 while a worker's record is alive "
                               "(a beat within two heartbeat intervals), else 0.",
                               labels=["worker"])
        beat = GaugeMetricFamily("celery_plus_worker_last_beat_seconds",
                                 "Seconds since a worker's last beat.", labels=["worker"])
        held = GaugeMetricFamily("celery_plus_worker_jobs", "Running jobs a worker holds.",
                                 labels=["worker"])
        for view in workers.workers(self.admin, now_ms):
            name = view.node or f"{view.host}:{view.pid}"
            up.add_metric([name], 1 if view.health == "alive" else 0)
            if view.last_heartbeat_ms is not None:
                beat.add_metric([name], max(now_ms - view.last_heartbeat_ms, 0) / 1000)
            held.add_metric([name], view.jobs)
        yield up
        yield beat
        yield held

    def _latency(self) -> Iterator[Metric]:
        wait = GaugeMetricFamily("celery_plus_wait_seconds", "Wait from ready (enqueued or "
                                 "due) to started of the newest 1,000 jobs started in the "
                                 "last hour, per queue: median and 95th percentile.",
                                 labels=["queue", "quantile"])
        samples = GaugeMetricFamily("celery_plus_wait_samples",
                                    "Jobs the wait quantiles are computed from.",
                                    labels=["queue"])
        for q in self.admin.latency(samples=METRICS_SAMPLES):
            wait.add_metric([q.queue, "0.5"], q.p50_s)
            wait.add_metric([q.queue, "0.95"], q.p95_s)
            samples.add_metric([q.queue], q.samples)
        yield wait
        yield samples
        runtime = GaugeMetricFamily("celery_plus_runtime_seconds", "Runtime (start to finish) "
                                    "of the newest 1,000 jobs completed in the last hour, per "
                                    "queue: median and 95th percentile.",
                                    labels=["queue", "quantile"])
        for q in self.admin.runtime(samples=METRICS_SAMPLES):
            runtime.add_metric([q.queue, "0.5"], q.p50_s)
            runtime.add_metric([q.queue, "0.95"], q.p95_s)
        yield runtime

    def _counters(self) -> Iterator[Metric]:
        backend: Any = getattr(self.admin.store, "backend", None)
        stats: dict[str, int] = dict(backend.stats()) if hasattr(backend, "stats") else {}
        for key, doc in COUNTERS:
            yield CounterMetricFamily(f"celery_plus_{key}", doc, value=stats.get(key, 0))


def metrics_text(admin: api.Admin, key_labels: bool = False) -> str:
    """The store's metrics in the Prometheus text exposition format (version 0.0.4)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(AdminCollector(admin, key_labels))
    return generate_latest(registry).decode()
