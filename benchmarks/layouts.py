"""The two Redis record layouts side by side: what a publish and a claim cost in each.

Issue #17: the compact layout (the default: the envelope deflated in ``P:m:{id}``) against the
hash layout (``plus_redis_compact_records = False``). Two key prefixes on one private
``redis-server``, ``--jobs`` copies of a real ``bench.noop`` envelope each; every sample is
taken in one layout then the other, in turn, so the machine's load weighs on both alike:

* *publish*: one ``publish`` (the store call of a ``delay()``), p50 ms;
* *claim*: a claim of one job carrying the previous one's ack, as a worker's loop does, p50 ms;
* *server*: Redis's own µs per publish and per claim (``INFO commandstats``: ``FCALL`` usec,
  read around each sample);
* *client*: µs to deflate and to inflate the envelope (``stores/redis/envelope.py``).

    python -m benchmarks.layouts [--jobs 5000]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
import timeit
import uuid
from dataclasses import dataclass, field

import redis

from celery_plus import Celery
from celery_plus.admin import connect
from celery_plus.model.store import Backend, NewJob, Settle
from celery_plus.stores.redis.envelope import deflated, envelope_bytes

from .memory import private_redis

LAYOUTS = {"compact": True, "hash": False}


@dataclass
class Layout:
    """One layout's backend, its jobs and what was measured."""

    backend: Backend
    prefix: str
    jobs: list[NewJob]
    publish_s: list[float] = field(default_factory=list)
    claim_s: list[float] = field(default_factory=list)
    server_us: dict[str, float] = field(default_factory=lambda: {"publish": 0.0, "claim": 0.0})
    settles: list[Settle] = field(default_factory=list)


def _fcall_us(client: redis.Redis) -> float:
    return float(client.info("commandstats").get("cmdstat_fcall", {}).get("usec", 0))


def _timed(client: redis.Redis, side: Layout, kind: str, call: object) -> float:
    """Seconds ``call`` took; its server µs added to ``side.server_us[kind]``."""
    before = _fcall_us(client)
    started = time.perf_counter()
    result = call()  # type: ignore[operator]
    elapsed = time.perf_counter() - started
    side.server_us[kind] += _fcall_us(client) - before
    if kind == "claim":
        side.settles = [Settle(c.job_id, c.token, "ack") for c in result.claims]
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    args = parser.parse_args()
    print(f"load average before: {os.getloadavg()[0]:.1f}", flush=True)
    with private_redis() as url, contextlib.ExitStack() as stack:
        client = redis.Redis.from_url(url)
        sides: dict[str, Layout] = {}
        text = ""
        for name, compact in LAYOUTS.items():
            app = Celery("bench", broker=f"plus+{url}", backend=None, set_as_current=False)
            prefix = f"layout-{name}-{uuid.uuid4().hex[:6]}"
            app.conf.update(plus_key_prefix=prefix, plus_redis_compact_records=compact,
                            task_default_queue="q")
            admin = stack.enter_context(connect(app))
            backend: Backend = admin.store.backend  # type: ignore[attr-defined]
            template = app.send_task("bench.noop", args=(1, 2)).id
            raw = backend.raw_message(template)
            assert raw is not None
            text = raw.decode()
            sides[name] = Layout(backend, prefix, [
                NewJob(id=f"j{n}", queue="q", message=text.replace(template, f"j{n}"),
                       name="bench.noop") for n in range(args.jobs)])
        for n in range(args.jobs):
            for side in sides.values():
                job = side.jobs[n]
                side.publish_s.append(_timed(client, side, "publish",
                                             lambda s=side, j=job: s.backend.publish(j)))
        for _ in range(args.jobs):
            for side in sides.values():
                side.claim_s.append(_timed(client, side, "claim", lambda s=side: s.backend.claim(
                    ["q"], "bench", 1, s.settles)))
        stored = deflated(text)
        deflate_us = min(timeit.repeat(lambda: deflated(text), number=2000, repeat=5)) / 2000
        inflate_us = min(timeit.repeat(lambda: envelope_bytes(stored), number=2000,
                                       repeat=5)) / 2000
        for name, side in sides.items():
            print(f"{name:8} publish p50 {statistics.median(side.publish_s) * 1000:.3f} ms "
                  f"(server {side.server_us['publish'] / args.jobs:.1f} µs), claim+ack p50 "
                  f"{statistics.median(side.claim_s) * 1000:.3f} ms "
                  f"(server {side.server_us['claim'] / args.jobs:.1f} µs)")
        print(f"client: deflate {deflate_us * 1e6:.1f} µs, inflate {inflate_us * 1e6:.1f} µs "
              f"(a {len(text)}-byte envelope, {len(stored)} bytes stored)")
        client.close()
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
