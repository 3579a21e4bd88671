"""What dead-lettering a job costs the Redis server, with the admin's listing index kept by the
store (``lua/lib.lua``'s ``index_dead_letter``, issue #28) and without it.

On a ``redis-server`` of the run's own, ``--jobs`` copies of a real ``bench.noop`` envelope are
published, claimed ``--batch`` at a time and settled as failed ``--batch`` at a time (a task
that raised, out of retries: the worker's ``fail`` settle), in two key prefixes in turn each
round: *kept* (the index caught up, so each dead letter is added to it) and *behind* (the index
has no high-water mark, as a store an earlier release wrote: ``index_dead_letter`` looks and
returns). The settle phase's server µs per job (the scripts' time in ``INFO commandstats``) and
the server's CPU µs per job are printed, medians of ``--rounds``, with the load average.
Run it on the commit before (``git stash`` or a checkout) for the release without the index.

    python -m benchmarks.dead_letter_cost [--jobs 5000] [--batch 4] [--rounds 5]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import uuid

import redis

from celery_plus.model.store import Backend, NewJob, Settle

from .memory import private_redis
from .redis_cost import Phase, _phase, store_with_template

FAILURE = {"reason": "task failed", "exc_type": "ValueError", "exc_message": "boom",
           "traceback": "Traceback (most recent call last):\nValueError: boom\n"}


def _round(client: redis.Redis, backend: Backend, text: str, template_id: str, kept: bool,
           jobs: int, batch: int) -> Phase:
    prefix = backend.prefix  # type: ignore[attr-defined]
    for key in client.scan_iter(f"{prefix}:*", count=5000):
        client.delete(key)
    if kept:  # an index caught up with an empty P:dead
        client.set(f"{prefix}:ax:dead:hw", 0)
    else:  # an earlier release's store: dead letters, no index
        client.zadd(f"{prefix}:dead", {"old": 1})
    run = uuid.uuid4().hex[:6]
    for n in range(jobs):
        backend.publish(NewJob(id=f"{run}-{n}", queue="q", name="bench.noop",
                               message=text.replace(template_id, f"{run}-{n}")))
    claimed: list[Settle] = []
    while len(claimed) < jobs:
        claimed += [Settle(c.job_id, c.token, "fail", dict(FAILURE))
                    for c in backend.claim(["q"], "bench", batch).claims]
    chunks = [claimed[i:i + batch] for i in range(0, jobs, batch)]
    phase = _phase(client, jobs, [lambda c=c: backend.settle(c) for c in chunks])
    assert client.zcard(f"{prefix}:dead") == jobs + (not kept)
    # (the release before has no index: none kept, whatever the prefix)
    phase.commands["indexed"] = client.zcard(f"{prefix}:ax:dead:t:bench.noop") / jobs
    return phase


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args(argv)
    loads = [os.getloadavg()[0]]
    results: dict[str, list[Phase]] = {"kept": [], "behind": []}
    with private_redis() as url, contextlib.ExitStack() as stack:
        client = redis.Redis.from_url(url)
        backends: dict[str, Backend] = {}
        template = ("", "")
        for name in results:
            backends[name], template = store_with_template(stack, url, f"dl-{name}")
        for _ in range(args.rounds):
            for name, backend in backends.items():
                results[name].append(_round(client, backend, *template, name == "kept",
                                            args.jobs, args.batch))
            loads.append(os.getloadavg()[0])
        client.close()
    print(f"fail settles of {args.jobs:,} jobs, {args.batch} a call, medians of "
          f"{args.rounds} rounds (load average {min(loads):.1f}-{max(loads):.1f}):")
    for name, phases in results.items():
        server = [p.server_us for p in phases]
        cpu = [p.cpu_us for p in phases]
        print(f"  {name:7} server {statistics.median(server):6.1f} µs/job "
              f"(rounds {', '.join(f'{v:.1f}' for v in server)}), "
              f"CPU {statistics.median(cpu):6.1f} µs/job, "
              f"indexed {statistics.median(p.commands['indexed'] for p in phases):.0%}")


if __name__ == "__main__":
    main()
