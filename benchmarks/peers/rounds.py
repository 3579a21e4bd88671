"""One round: every system once per measure, in the round's rotated order; each drain starts on
a full queue."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from dataclasses import dataclass, field

import redis

from benchmarks.marks import await_mark
from benchmarks.pools import _stop
from benchmarks.throughput import ROOT

from .servers import Servers, clean, env, prepare
from .systems import COLUMNS, System

SCRIPT_COMMANDS = ("cmdstat_fcall", "cmdstat_fcall_ro", "cmdstat_evalsha", "cmdstat_eval")


@dataclass
class Calls:
    """The store server's work per job during a drain (Redis systems; ``INFO commandstats``)."""

    scripts: float  # FCALL / EVALSHA / EVAL calls
    commands: float  # every other command, those the scripts run included
    server_us: float  # server time of all of them
    #: round trips: the server's reads of requests (``total_reads_processed``), every client
    #: of the worker's together; a pipeline sent at once is one (the store calls per job)
    trips: float = 0.0


@dataclass
class Figures:
    """One system's figures in one round: rates per second, store calls per drain column."""

    rates: dict[str, float] = field(default_factory=dict)  # "enqueue", "batch", drain columns
    calls: dict[str, Calls] = field(default_factory=dict)


@dataclass
class Round:
    order: list[str]
    load: tuple[float, float]  # 1-minute load average at the round's start and end
    figures: dict[str, Figures]


def _fill(system: System, run: str, servers: Servers, jobs: int, mode: str) -> float:
    """Enqueue ``jobs`` with the system's single or batch call; the rate per second."""
    out = subprocess.run([sys.executable, "-m", "benchmarks.peers.send", system.app, mode,
                          str(jobs)], env=env(system, run, servers), cwd=system.code or ROOT,
                         check=True, capture_output=True, text=True)
    return (jobs - 1) / float(out.stdout.strip().splitlines()[-1])


#: The key under which :func:`_commandstats` keeps the server's reads of requests.
READS = "stat_total_reads_processed"


def _commandstats(client: redis.Redis) -> dict[str, tuple[int, int]]:
    reads = int(client.info("stats")["total_reads_processed"])
    stats = client.info("commandstats")
    return {READS: (reads, 0),
            **{name: (int(v["calls"]), int(v["usec"])) for name, v in stats.items()}}


def _calls(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]],
           jobs: int) -> Calls:
    delta = {k: (c - before.get(k, (0, 0))[0], u - before.get(k, (0, 0))[1])
             for k, (c, u) in after.items() if k != "cmdstat_info"}
    # Less the readings' own INFO requests: the first reading's second, the second's first.
    trips = delta.pop(READS)[0] - 2
    scripts = sum(c for k, (c, _) in delta.items() if k in SCRIPT_COMMANDS)
    others = sum(c for k, (c, _) in delta.items() if k not in SCRIPT_COMMANDS)
    return Calls(scripts / jobs, others / jobs, sum(u for _, u in delta.values()) / jobs,
                 trips / jobs)


def _drain(system: System, column: str, run: str, servers: Servers, jobs: int,
           timeout: float = 300) -> tuple[float, Calls | None]:
    """Start the worker on the full queue; completions per second, first to last."""
    marks = redis.Redis.from_url(servers.marks)
    store = redis.Redis.from_url(servers.store) if system.store == "redis" else None
    before = _commandstats(store) if store else {}
    proc = subprocess.Popen(system.drains[column](run), env=env(system, run, servers),
                            cwd=system.code or ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        await_mark(marks, f"{run}:mark:last", proc, timeout, f"{system.key} {column}")
        calls = _calls(before, _commandstats(store), jobs) if store else None
        first = float(marks.get(f"{run}:mark:first") or 0)
        last = float(marks.get(f"{run}:mark:last") or 0)
    finally:
        _stop(proc)
        marks.close()
        if store:
            store.close()
    return (jobs - 1) / (last - first), calls


def _run(system: System, servers: Servers, jobs: int, figures: Figures, mode: str,
         column: str | None) -> None:
    """One run: fill a queue (timed), then drain it with ``column``'s worker if one is given."""
    run = f"peers-{system.key}-{uuid.uuid4().hex[:8]}"
    prepare(system, run, servers)
    store = redis.Redis.from_url(servers.store) if system.store == "redis" else None
    try:
        before = _commandstats(store) if store else {}
        rate = _fill(system, run, servers, jobs, mode)
        measure = "enqueue" if mode == "single" else "batch"
        figures.rates.setdefault(measure, rate)
        if store and measure not in figures.calls:
            # (the fill's warm-up call and the app's start count too: a few per 3,000)
            figures.calls[measure] = _calls(before, _commandstats(store), jobs)
        if column is not None:
            figures.rates[column], calls = _drain(system, column, run, servers, jobs)
            if calls:
                figures.calls[column] = calls
    finally:
        if store:
            store.close()
        clean(system, run, servers)


def run_round(index: int, systems: list[System], servers: Servers, jobs: int,
              columns: tuple[str, ...] = COLUMNS, batch_fill: bool = False) -> Round:
    """Round ``index``: column by column, every system that has it once, in an order rotated
    by ``index``. A system's first queue is filled one call at a time, the next ones with its
    batch enqueue where it has one (a system with one column gets a batch fill alone).
    ``columns``: the drain columns measured (all by default); ``batch_fill``: every queue
    filled with the batch enqueue where there is one (a quicker fill for the drains)."""
    shift = index % len(systems)
    order = systems[shift:] + systems[:shift]
    start = os.getloadavg()[0]
    figures = {system.key: Figures() for system in order}
    for column in columns:
        for system in (s for s in order if column in s.drains):
            mode = ("batch" if system.has_batch and (batch_fill or figures[system.key].rates)
                    else "single")
            _run(system, servers, jobs, figures[system.key], mode, column)
    for system in (s for s in order if s.has_batch and "batch" not in figures[s.key].rates):
        _run(system, servers, jobs, figures[system.key], "batch", None)
    for system in order:
        print(f"  round {index + 1}: {system.key} {format_rates(figures[system.key])}",
              file=sys.stderr, flush=True)
    return Round([s.key for s in order], (start, os.getloadavg()[0]), figures)


def format_rates(figures: Figures) -> str:
    return ", ".join(f"{k} {v:.0f}/s" for k, v in figures.rates.items())
