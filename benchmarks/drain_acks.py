"""``python -m benchmarks.drain_acks [--jobs 2000] [--every 10] [--stores plus,...]``: an ack's
latency (task body returns → its settle durable in the store) while a ``prefork -c 2`` worker
drains a full queue.

``benchmarks.pools`` times acks one job at a time, when the prefetch window is never full; in a
drain it always is, and a settle then waits (at most ``SETTLE_RIDE_S``) for the claim that the
freed slots bring (issue #29). Every ``--every``-th job is watched: its task writes the time its
body returns; once the drain is over, its record's ``finished_ms`` (the store's clock as the
settle ran, on the same machine) gives when the settle landed. ``finished_ms`` is whole
milliseconds, so a latency may read up to 1 ms short; on PostgreSQL it is the settle's
transaction time, before its commit.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import uuid

from benchmarks.pools import POOLS, _stop, _worker
from benchmarks.throughput import ROOT, _cleanup, _env

_PROBE = """
import json, sys, time
import redis
from benchmarks.bench_app import RUN, REDIS_URL, app, timed

jobs, every = int(sys.argv[1]), int(sys.argv[2])
marks = redis.Redis.from_url(REDIS_URL)
with app.publish_batch():
    ids = [timed.delay(i).id for i in range(jobs)]
conn = app.connection_for_write()
conn.ensure_connection()
store = conn.transport.backend
print("published", flush=True)
sys.stdin.readline()  # the worker is started
deadline = time.monotonic() + 600
watched = range(0, jobs, every)

def completed(job_id):
    record = store.record(job_id)
    return record is not None and record.state == "completed"

while not completed(ids[watched[-1]]):
    if time.monotonic() > deadline:
        raise SystemExit("timed out")
    time.sleep(0.05)
time.sleep(1.0)  # the last settles of the others
out = []
for i in watched:
    record, returned = store.record(ids[i]), marks.get(f"{RUN}:returned:{i}")
    if record is not None and record.state == "completed" and returned is not None:
        out.append(record.finished_ms / 1000 - float(returned))
print(json.dumps(out))
"""


def acks_in_a_drain(kind: str, jobs: int, every: int) -> list[float]:
    """Seconds from each watched task's return to its settle landing in the store."""
    run = f"bench-{kind}-{uuid.uuid4().hex[:8]}"
    probe = subprocess.Popen([sys.executable, "-c", _PROBE, str(jobs), str(every)],
                             env=_env(kind, run), cwd=ROOT, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    assert probe.stdin is not None and probe.stdout is not None
    worker = None
    try:
        if probe.stdout.readline().strip() != "published":
            raise RuntimeError(f"{kind}: the probe did not publish")
        worker = _worker(kind, run, POOLS[1])
        probe.stdin.write("go\n")
        probe.stdin.flush()
        return [float(x) for x in json.loads(probe.stdout.readlines()[-1])]
    finally:
        if worker is not None:
            _stop(worker)
        probe.kill()
        probe.wait()
        _cleanup(run)


def _ms(values: list[float]) -> str:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    return (f"{statistics.median(ordered) * 1000:.1f} / {p95 * 1000:.1f} / "
            f"{ordered[-1] * 1000:.1f}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2000)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--stores", default="plus,plus-pg,plus-sqlite")
    args = parser.parse_args(argv)
    print(f"ack latency in a prefork -c 2 drain of {args.jobs} jobs, every {args.every}th "
          "watched: median / p95 / max ms (samples)")
    for kind in args.stores.split(","):
        found = acks_in_a_drain(kind, args.jobs, args.every)
        print(f"  {kind}: {_ms(found)} ({len(found)})", flush=True)


if __name__ == "__main__":
    main()
