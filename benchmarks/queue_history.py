"""The queue history's cost on every store (issue #28; docs/admin.md "Queue depth and wait over
time"): what the worker whose maintenance turn it is spends on one sample, and what the admin
spends reading a day of them.

For each store (``sqlite``: a file in the temp folder; ``redis``: a fresh key prefix of the test
Redis; ``postgres``: a fresh schema of the test database):

1. ``--waiting`` enqueued jobs over ``--queues`` queues (``publish_many``, 5,000 a call);
2. ``record_sample`` timed ``--rounds`` times (each in a bucket of its own, so each writes);
3. the store's history replaced by a full day (1,440 samples of ``--queues`` queues each), and
   ``Admin.queue_history`` over 24 h timed ``--rounds`` times, for every queue added up and for
   one queue (each read also takes the admin's own sample of now).

Figures are printed in ms (median and worst). Each store is removed afterwards.

    python -m benchmarks.queue_history [--stores sqlite,redis,postgres] [--waiting 100000]
                                       [--queues 20] [--rounds 5]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable

from celery_plus import Celery
from celery_plus.admin import connect
from celery_plus.model.store import NewJob
from celery_plus.stores.admin_base.queue_history import STEP_MS, encode, record_sample
from tests.fast.conformance.stores import PG_URL
from tests.fast.unit.test_admin_cli import REDIS_URL, drop_store

MESSAGE = b'{"body":"","headers":{},"properties":{}}'


def _timed(call: Callable[[], object], rounds: int) -> str:
    took = []
    for _ in range(rounds):
        start = time.perf_counter()
        call()
        took.append((time.perf_counter() - start) * 1000)
    return f"{statistics.median(took):.1f} ({max(took):.1f})"


def run(kind: str, waiting: int, queues: int, rounds: int) -> None:
    prefix = f"qh{uuid.uuid4().hex[:8]}"
    broker = {"sqlite": f"plus+sqlite:///{tempfile.mkdtemp()}/store.db",
              "redis": f"plus+{REDIS_URL}", "postgres": f"plus+{PG_URL}"}[kind]
    app = Celery("queue-history-bench", broker=broker, set_as_current=False)
    app.conf.update(plus_key_prefix=prefix, plus_pg_schema=prefix)
    try:
        with connect(app) as admin:
            store, backend = admin.store, admin.store.backend  # type: ignore[attr-defined]
            for start in range(0, waiting, 5000):
                backend.publish_many([NewJob(id=f"j{i}", queue=f"q{i % queues}",
                                             message=MESSAGE, name="bench.job")
                                      for i in range(start, min(waiting, start + 5000))])
            steps = iter(range(1000, 1000 + rounds))
            sample = _timed(lambda: record_sample(store, next(steps), 10**12), rounds)
            now = store.now_ms()
            first = now - now % STEP_MS
            store.history_put(0, 0, "{}", first + 1)  # drops every earlier sample
            for k in range(1440):
                at = first - k * STEP_MS
                store.history_put(at, at, encode([(f"q{q}", waiting // queues, at - 1000)
                                                  for q in range(queues)]), 0)
            every = _timed(lambda: admin.queue_history(None, 86400), rounds)
            one = _timed(lambda: admin.queue_history("q1", 86400), rounds)
        print(f"{kind}: {waiting:,} enqueued in {queues} queues; ms, median (worst) of "
              f"{rounds}: one sample {sample}; 24 h read, every queue {every}, one queue {one}")
    finally:
        app.close()
        drop_store(kind, prefix)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stores", default="sqlite,redis,postgres")
    parser.add_argument("--waiting", type=int, default=100_000)
    parser.add_argument("--queues", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    for kind in args.stores.split(","):
        run(kind, args.waiting, args.queues, args.rounds)


if __name__ == "__main__":
    main()
