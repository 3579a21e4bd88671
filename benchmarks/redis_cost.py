"""What the Redis store costs the server per job: publish, claim and settle (issue #29).

On a ``redis-server`` of the run's own, for each Redis layout (``--layouts``), ``--jobs`` copies
of a real ``bench.noop`` envelope are published one call at a time (the store call of a
``delay()``), then claimed ``--batch`` at a time and settled (acked) ``--batch`` at a time, as
a worker's loop does with its prefetch window. Around each phase ``INFO commandstats`` is read:

* *server µs per job*: the ``FCALL`` (or ``EVALSHA``) time of the phase, divided by the jobs
  (Redis counts the commands a script runs inside the script's time, and again under their
  own names: those are listed, not added);
* *CPU µs per job*: the server process's CPU time over the phase (``INFO cpu``: user + system,
  so reading the calls and writing the replies too), per job. Unlike the commands' time it
  does not grow when the machine's load preempts the server mid-command;
* *commands per job*: the commands the scripts ran, by name, per job;
* *client µs per publish*: the median wall time of one ``publish`` store call;
* *bytes per job*: ``used_memory`` growth over the published jobs, divided by the jobs;
* *LPUSH*: the reference, plain Celery's publish (kombu's Redis transport: one ``LPUSH`` of the
  same envelope per job), measured in the same rounds.

Layouts run in turn, phase by phase, ``--rounds`` times (medians given), so load weighs on
each alike::

    python -m benchmarks.redis_cost [--jobs 5000] [--batch 4] [--rounds 3]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import redis

from celery_plus import Celery
from celery_plus.admin import connect
from celery_plus.model.store import Backend, NewJob, Settle

from .memory import private_redis

#: Layout name -> the settings that make it.
LAYOUTS: dict[str, dict[str, object]] = {
    "compact": {"plus_redis_compact_records": True},
    "deflated": {"plus_redis_compact_records": True, "plus_redis_deflate": True},
    "hash": {"plus_redis_compact_records": False},
}
SCRIPTS = ("cmdstat_fcall", "cmdstat_evalsha", "cmdstat_eval", "cmdstat_fcall_ro")
PHASES = ("publish", "claim", "settle")


@dataclass
class Phase:
    """One phase of one round: server µs per job, commands per job, client µs per call."""

    server_us: float
    commands: dict[str, float]
    client_us: float
    other_us: dict[str, float] = field(default_factory=dict)  # µs per job of other commands
    cpu_us: float = 0.0


@dataclass
class Result:
    phases: dict[str, list[Phase]] = field(default_factory=lambda: {p: [] for p in PHASES})
    bytes_per_job: list[float] = field(default_factory=list)


def command_stats(client: redis.Redis) -> dict[str, tuple[int, int]]:
    return {k: (int(v["calls"]), int(v["usec"]))
            for k, v in client.info("commandstats").items()}


def server_cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def _phase(client: redis.Redis, jobs: int, calls: list[Callable[[], object]]) -> Phase:
    """Run ``calls`` one by one; the server's work over them, per job."""
    cpu = server_cpu(client)
    before = command_stats(client)
    times = []
    for call in calls:
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    after = command_stats(client)
    cpu = server_cpu(client) - cpu
    delta = {k: (c - before.get(k, (0, 0))[0], u - before.get(k, (0, 0))[1])
             for k, (c, u) in after.items() if k != "cmdstat_info"}
    server = sum(u for k, (_, u) in delta.items() if k in SCRIPTS)
    commands = {k.removeprefix("cmdstat_"): c / jobs for k, (c, _) in sorted(delta.items())
                if c and k not in SCRIPTS}
    other = {k.removeprefix("cmdstat_"): u / jobs for k, (_, u) in delta.items()
             if k not in SCRIPTS}
    return Phase(server / jobs, commands, statistics.median(times) * 1e6, other,
                 cpu * 1e6 / jobs)


def _round(client: redis.Redis, backends: dict[str, Backend], template: tuple[str, str],
           jobs: int, batch: int, results: dict[str, Result]) -> None:
    text, template_id = template
    for name, backend in backends.items():
        run = uuid.uuid4().hex[:6]
        new = [NewJob(id=f"{run}-{n}", queue="q", message=text.replace(template_id,
                                                                        f"{run}-{n}"),
                      name="bench.noop") for n in range(jobs)]
        used = int(client.info("memory")["used_memory"])
        results[name].phases["publish"].append(_phase(
            client, jobs, [lambda b=backend, j=job: b.publish(j) for job in new]))
        results[name].bytes_per_job.append(
            (int(client.info("memory")["used_memory"]) - used) / jobs)
        claimed: list[Settle] = []

        def claim(b: Backend = backend, into: list[Settle] = claimed) -> None:
            into.extend(Settle(c.job_id, c.token, "ack")
                        for c in b.claim(["q"], "bench", batch).claims)

        results[name].phases["claim"].append(
            _phase(client, jobs, [claim] * ((jobs + batch - 1) // batch)))
        assert len(claimed) == jobs, (name, len(claimed))
        chunks = [claimed[i:i + batch] for i in range(0, jobs, batch)]
        results[name].phases["settle"].append(
            _phase(client, jobs, [lambda b=backend, c=c: b.settle(c) for c in chunks]))
        prefix = backend.prefix  # type: ignore[attr-defined]
        client.delete(f"{prefix}:done", f"{prefix}:seq", f"{prefix}:wake:q")
        for n in range(0, jobs, 500):
            client.delete(*[f"{prefix}:{kind}:{job.id}" for job in new[n:n + 500]
                            for kind in ("job", "m")])


def _lpush_us(phase: Phase) -> float:
    return phase.other_us.get("lpush", 0.0)


def _median(values: list[float]) -> float:
    return statistics.median(values) if values else 0.0


def report(results: dict[str, Result], jobs: int, batch: int) -> None:
    print(f"\nper job, medians of {len(next(iter(results.values())).bytes_per_job)} rounds "
          f"(N = {jobs}, claims and settles {batch} at a time):")
    for name, result in results.items():
        print(f"{name}: {_median(result.bytes_per_job):,.0f} bytes per waiting job")
        for phase in PHASES:
            rounds = result.phases[phase]
            commands: dict[str, float] = {}
            for r in rounds:
                for k, v in r.commands.items():
                    commands[k] = commands.get(k, 0.0) + v / len(rounds)
            listed = ", ".join(f"{k} {v:.2f}" for k, v in commands.items())
            print(f"  {phase:8} server {_median([r.server_us for r in rounds]):5.1f} µs "
                  f"(rounds {', '.join(f'{r.server_us:.1f}' for r in rounds)}), CPU "
                  f"{_median([r.cpu_us for r in rounds]):5.1f} µs "
                  f"(rounds {', '.join(f'{r.cpu_us:.1f}' for r in rounds)}); "
                  f"client {_median([r.client_us for r in rounds]):5.0f} µs/call; "
                  f"{sum(commands.values()):.2f} commands: {listed}")



def store_with_template(stack: contextlib.ExitStack, url: str, prefix: str,
                        **conf: Any) -> tuple[Backend, tuple[str, str]]:
    """The store of a celery-plus app on ``url`` with key prefix ``prefix`` (closed with
    ``stack``), and a real envelope published there: (its stored text, its job id)."""
    app = Celery("bench", broker=f"plus+{url}", backend=None, set_as_current=False)
    app.conf.update(plus_key_prefix=prefix, task_default_queue="q", **conf)
    admin = stack.enter_context(connect(app))
    backend: Backend = admin.store.backend  # type: ignore[attr-defined]
    sent = app.send_task("bench.noop", args=(1, 2)).id
    raw = backend.raw_message(sent)
    assert raw is not None
    return backend, (raw.decode(), sent)

def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--layouts", default=",".join(LAYOUTS))
    args = parser.parse_args(argv)
    loads = [os.getloadavg()[0]]
    with private_redis() as url, contextlib.ExitStack() as stack:
        client = redis.Redis.from_url(url)
        backends: dict[str, Backend] = {}
        template = ("", "")
        for name in args.layouts.split(","):
            backends[name], template = store_with_template(stack, url, f"cost-{name}",
                                                           **LAYOUTS[name])
            sent = template[1]
            client.delete(f"cost-{name}:q:q", f"cost-{name}:job:{sent}", f"cost-{name}:m:{sent}")
        results = {name: Result() for name in backends}
        lpush: list[Phase] = []
        for _ in range(args.rounds):
            _round(client, backends, template, args.jobs, args.batch, results)
            lpush.append(_phase(client, args.jobs, [
                lambda: client.lpush("cost-lpush", template[0]) for _ in range(args.jobs)]))
            client.delete("cost-lpush")
            loads.append(os.getloadavg()[0])
        client.close()
    report(results, args.jobs, args.batch)
    print(f"LPUSH (plain Celery's publish): server "
          f"{_median([_lpush_us(p) for p in lpush]):.1f} µs "
          f"(rounds {', '.join(f'{_lpush_us(p):.1f}' for p in lpush)}), CPU "
          f"{_median([p.cpu_us for p in lpush]):.1f} µs "
          f"(rounds {', '.join(f'{p.cpu_us:.1f}' for p in lpush)})")
    print(f"load average: {' → '.join(f'{x:.1f}' for x in loads)}")


if __name__ == "__main__":
    main()
