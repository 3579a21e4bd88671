"""The publisher's CPU per ``delay()`` on ``plus+redis://``, this tree against a base (issue #29).

Each measurement is a fresh process that sends ``--calls`` ``bench_app.counted`` jobs one
``delay()`` at a time (the first untimed) and reports ``time.process_time()`` per call: the
process's own CPU, which the machine's load inflates far less than it does rates. ``--stub``
replaces the store's round trip (``RedisBackend._eval_publish``) by its reply, so what is left
is Celery's, kombu's and celery-plus's Python alone. This tree and ``--base`` (a checkout,
e.g. ``git archive`` of another commit) alternate, ``--rounds`` times, against one private
``redis-server``::

    python -m benchmarks.delay_cpu --base /tmp/base [--stub] [--calls 3000] [--rounds 6]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import uuid
from pathlib import Path

from .memory import private_redis

ROOT = Path(__file__).resolve().parent.parent

_CHILD = """
import sys, time
from benchmarks.bench_app import counted
n, stub = int(sys.argv[1]), sys.argv[2] == "1"
counted.delay(0, n)
if stub:
    from celery_plus.stores.redis.backend import RedisBackend
    RedisBackend._eval_publish = lambda self, args: 1
started = time.process_time()
for i in range(1, n):
    counted.delay(i, n)
print((time.process_time() - started) / (n - 1) * 1e6)
"""


def _cpu_us(tree: Path, url: str, calls: int, stub: bool) -> float:
    env = {**os.environ, "BENCH_KIND": "plus", "BENCH_REDIS": url,
           "BENCH_RUN": f"cpu{uuid.uuid4().hex[:8]}", "PYTHONPATH": str(tree)}
    out = subprocess.run([sys.executable, "-c", _CHILD, str(calls), "1" if stub else "0"],
                         env=env, cwd=tree, check=True, capture_output=True, text=True)
    return float(out.stdout.split()[-1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", type=Path, required=True)
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--stub", action="store_true", help="no round trip to the store")
    args = parser.parse_args(argv)
    figures: dict[str, list[float]] = {"head": [], "base": []}
    loads = [os.getloadavg()[0]]
    with private_redis() as url:
        for r in range(args.rounds):
            order = [("base", args.base), ("head", ROOT)]
            for name, tree in order if r % 2 == 0 else reversed(order):
                figures[name].append(_cpu_us(tree, url, args.calls, args.stub))
            loads.append(os.getloadavg()[0])
    ratios = [h / b for h, b in zip(figures["head"], figures["base"], strict=True)]
    print(f"CPU µs per delay(){' (store call stubbed)' if args.stub else ''}, "
          f"{args.calls} calls, {args.rounds} rounds (load average "
          f"{' → '.join(f'{x:.1f}' for x in loads)}):")
    for name, values in figures.items():
        print(f"  {name}: median {statistics.median(values):.1f} "
              f"({', '.join(f'{v:.1f}' for v in values)})")
    print(f"  head/base: median {statistics.median(ratios):.2f}x "
          f"({', '.join(f'{v:.2f}' for v in ratios)})")


if __name__ == "__main__":
    main()
