"""Issue #16 acceptance 2, the long run: ``rate_limit="60/m"`` cluster-scoped on four workers
of two prefork processes each for 3 minutes, the same per key with 5 keys, and unlimited tasks
in the same queue; on one store.

    python -m tests.deploy.faults.long_rate_limits --store redis [--minutes 3 --rate 60/m]

A backlog larger than the limit allows in the run (``periodic.limited``, and
``periodic.per_key`` for keys k0..k4) is published first, ahead of the unlimited tasks in the
same queue; then unlimited tasks (``periodic.free``, 20 ms each) are published at 10 a second
for the whole run. Every task records its start (the task body, in the pool process).

Prints one JSON report (appended to ``PLUS_LONG_REPORT``, default ``.long-rate-limits.jsonl``):
the most starts any sliding window of the limit's length held (all together, and per key),
how many started, how many started out of publish order, and the unlimited tasks' publish-to-
start latency (p50 / p99 / max) and count. Exit status 1 if a window held more than the
limit, an unlimited task waited more than 5 s or did not start. Figures: docs/rate-limits.md.
The CI variant is ``tests/deploy/e2e/test_rate_limits.py``.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import time
import warnings
from itertools import pairwise

from celery_plus.send.options import parse_rate
from tests.deploy.e2e.periodic_checks import most_in_window
from tests.deploy.e2e.proj import make_app
from tests.support import wait_until

from .long_deployment import deployment, report, store_arguments

KEYS = [f"k{i}" for i in range(5)]
FREE_PER_SECOND = 10


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(int(q * len(ordered)), len(ordered) - 1)], 3) if ordered else 0.0


def _inversions(starts: list[dict[str, object]]) -> int:
    order = [int(str(e["n"])) for e in sorted(starts, key=lambda e: float(str(e["t"])))]
    return sum(1 for a, b in pairwise(order) if a > b)


def run(store: str, minutes: float, rate: str, baseline: bool = False) -> dict[str, object]:
    limit, window_ms = parse_rate("long run", rate)
    window = window_ms / 1000
    backlog = 0 if baseline else int(limit * (minutes * 60 / window + 2))
    with deployment(store, PLUS_TEST_RATE=rate) as dep:
        # The client knows the tasks (and their rate limit) as the workers do: the project
        # module, imported with the deployment's settings (its tasks are shared with every
        # app, Celery's default).
        os.environ.update(dep.env)
        warnings.filterwarnings("ignore", message="Task name .* is already registered")
        importlib.import_module("tests.deploy.e2e.periodic_proj")
        app = make_app(dep.prefix, broker_url=dep.url)
        for _ in range(4):
            dep.worker(pool="prefork", concurrency=2)
        time.sleep(5)  # the workers start
        with app.publish_batch():
            for n in range(backlog):
                app.send_task("periodic.limited", (n, 0.01))
                for key in KEYS:
                    app.send_task("periodic.per_key", (key, n, 0.01))
        started = time.time()
        end = started + minutes * 60
        sent = 0
        while time.time() < end:
            app.send_task("periodic.free", (round(time.time() * 1000), 0.02))
            sent += 1
            time.sleep(max(started + sent / FREE_PER_SECOND - time.time(), 0))
        # Every unlimited task published has its start counted, the last ones' too (a fixed
        # pause here counted a late start as none under load).
        with contextlib.suppress(AssertionError):  # the report says how many did not start
            wait_until(lambda: len(dep.events("free")) >= sent, timeout=30,
                       message="every unlimited task started")
        dep.stop()
        app.close()
        limited = dep.events("limited")
        keyed = dep.events("per_key")
        free = dep.events("free")
        latency = [float(str(e["t"])) - int(str(e["n"])) / 1000 for e in free]
        most = most_in_window([float(str(e["t"])) for e in limited], window)
        per_key = {k: [e for e in keyed if e["key"] == k] for k in KEYS}
        most_per_key = {k: most_in_window([float(str(e["t"])) for e in v], window)
                        for k, v in per_key.items()}
        report: dict[str, object] = {
            "scenario": ("baseline: unlimited tasks alone" if baseline
                     else "cluster rate limit: 4 workers x 2 processes"), "store": store,
            "minutes": minutes, "rate": rate, "backlog_per_group": backlog,
            "limited_started": len(limited), "most_in_a_window": most,
            "limited_out_of_order": _inversions(limited),
            "per_key_started": {k: len(v) for k, v in per_key.items()},
            "most_in_a_window_per_key": most_per_key,
            "per_key_out_of_order": {k: _inversions(v) for k, v in per_key.items()},
            "free_published": sent, "free_started": len(free),
            "free_latency_s": {"p50": _percentile(latency, 0.5),
                               "p99": _percentile(latency, 0.99),
                               "max": round(max(latency, default=0.0), 3)},
        }
        report["ok"] = (most <= limit and all(m <= limit for m in most_per_key.values())
                        and max(latency, default=0.0) <= 5.0 and len(free) == sent)
        return report


def main(argv: list[str] | None = None) -> int:
    parser = store_arguments(__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--rate", default="60/m")
    parser.add_argument("--baseline", action="store_true",
                        help="no rate-limited backlog: the unlimited tasks' latency alone, "
                             "to compare with a run's under the same load")
    args = parser.parse_args(argv)
    result = run(args.store, args.minutes, args.rate, args.baseline)
    return report(result, ".long-rate-limits.jsonl")


if __name__ == "__main__":
    sys.exit(main())
