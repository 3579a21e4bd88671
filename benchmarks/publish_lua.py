"""Server time of publish.lua variants, side by side on one Redis server (issue #29).

Each Lua file given is loaded as a function of one library, after this tree's ``lib.lua``
(as the store loads ``publish.lua``; an older ``publish.lua`` runs on it as long as the helpers
it calls are there), with ``empty`` (``return 1``: the floor of an ``FCALL`` with the same
arguments and the per-call prelude) and plain Celery's ``LPUSH`` of the same envelope. In
each round every variant publishes ``--jobs`` new ids (a plain ``delay()``'s nine arguments,
pipelined 50 at a time), the order rotated by one each round; per job, from ``INFO
commandstats`` and ``INFO cpu`` around it: the ``FCALL`` time (the commands inside included),
the server's CPU, and the commands the variant ran with their own time. Medians of the
rounds::

    git show 5b121ae:celery_plus/stores/redis/lua/publish.lua > /tmp/old.lua
    python -m benchmarks.publish_lua /tmp/old.lua celery_plus/stores/redis/lua/publish.lua
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import uuid
from pathlib import Path

import redis

from celery_plus.stores.redis.scripts import lib_lua, library_source

from .memory import private_redis
from .redis_cost import command_stats, server_cpu

ENVELOPE = "x" * 600  # about a deflated bench.noop envelope's size


def _name(index: int, path: str) -> str:
    """The function name of variant ``path`` (letters, digits and underscores only)."""
    stem = re.sub(r"\W", "_", Path(path).stem)
    return f"v{index}_{stem}"


def _publish(client: redis.Redis, variant: str, prefix: str, jobs: int) -> None:
    pipe = client.pipeline(transaction=False)
    for n in range(jobs):
        if variant == "lpush":
            pipe.lpush(f"{prefix}:list", ENVELOPE)
        else:
            pipe.execute_command("FCALL", f"bench_{variant}", 1, prefix, prefix,
                                 str(uuid.uuid4()), "q", ENVELOPE, "bench.noop", 300000, 0, 0, 0)
        if n % 50 == 49:
            pipe.execute()
    pipe.execute()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lua", nargs="+", help="publish.lua variants (named by file stem)")
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args(argv)
    bodies = {_name(i, p): Path(p).read_text() for i, p in enumerate(args.lua)}
    bodies["empty"] = "return 1"
    names = [*bodies, "lpush"]
    took: dict[str, list[float]] = {n: [] for n in names}
    cpu: dict[str, list[float]] = {n: [] for n in names}
    inner: dict[str, dict[str, list[float]]] = {n: {} for n in names}
    loads = [os.getloadavg()[0]]
    with private_redis() as url:
        client = redis.Redis.from_url(url)
        client.function_load(library_source("bench", lib_lua(), bodies), replace=True)
        for r in range(args.rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                prefix = f"b{r}{name}"
                before, cpu0 = command_stats(client), server_cpu(client)
                _publish(client, name, prefix, args.jobs)
                after, cpu1 = command_stats(client), server_cpu(client)
                delta = {k: (c - before.get(k, (0, 0))[0], u - before.get(k, (0, 0))[1])
                         for k, (c, u) in after.items() if k != "cmdstat_info"}
                top = "cmdstat_lpush" if name == "lpush" else "cmdstat_fcall"
                took[name].append(delta[top][1] / args.jobs)
                cpu[name].append((cpu1 - cpu0) * 1e6 / args.jobs)
                for key, (calls, usec) in delta.items():
                    if calls and key != top:
                        inner[name].setdefault(key.removeprefix("cmdstat_"), []).append(
                            usec / args.jobs)
                client.flushall()
            loads.append(os.getloadavg()[0])
        client.close()
    print(f"per job, medians of {args.rounds} rounds of {args.jobs} "
          f"(load average {' → '.join(f'{x:.1f}' for x in loads)}):")
    for name in names:
        commands = ", ".join(f"{k} {statistics.median(v):.2f}"
                             for k, v in sorted(inner[name].items()))
        print(f"{name:16} server {statistics.median(took[name]):5.1f} µs (rounds "
              f"{', '.join(f'{x:.1f}' for x in took[name])}), CPU "
              f"{statistics.median(cpu[name]):5.1f} µs; commands (µs): {commands}")


if __name__ == "__main__":
    main()
