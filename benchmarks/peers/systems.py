"""The systems the benchmark compares: how each one's worker starts, its settings, its guarantee.

Every system runs the same counted no-op (one Redis ``INCR`` on the marks server) at its durable
setting, with one worker process. The drain columns: ``solo`` (one job at a time), ``prefork -c 2``
(Celery only) and ``x8`` (eight at once in one process: Celery's ``threads -c 8``, Dramatiq's
8 threads, Huey's 8 thread workers, Procrastinate's concurrency 8).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, replace

PY = sys.executable
COLUMNS = ("solo", "prefork -c 2", "x8")
Command = Callable[[str], list[str]]


@dataclass(frozen=True)
class System:
    key: str
    label: str
    store: str  # "redis", "pg" or "sqlite": which server or file the run needs
    app: str  # the module benchmarks.peers.send imports
    has_batch: bool
    drains: dict[str, Command]  # column -> the worker's command line for a run
    guarantee: str
    kind: str = ""  # BENCH_KIND for benchmarks.bench_app
    #: a checkout whose celery_plus the run imports (``--base``): its processes start in it, as
    #: ``python -m`` puts the working directory first on the path
    code: str = ""


def _celery(cli: str, pool: str) -> Command:
    def command(run: str) -> list[str]:
        return [PY, "-m", cli, "-A", "benchmarks.bench_app", "worker", *pool.split(),
                "--loglevel=WARNING", "--without-gossip", "--without-mingle",
                "--without-heartbeat", f"--hostname={run}@%h"]
    return command


def _plus(key: str, label: str, store: str, guarantee: str) -> System:
    return System(key, label, store, "benchmarks.bench_app", True, {
        "solo": _celery("celery_plus.cli", "--pool=solo --concurrency=1"),
        "prefork -c 2": _celery("celery_plus.cli", "--pool=prefork --concurrency=2"),
        "x8": _celery("celery_plus.cli", "--pool=threads --concurrency=8"),
    }, guarantee, kind=key)


def _fixed(*cmd: str) -> Command:
    return lambda run: [PY, "-m", *cmd]


PLUS_NOTE = ("at least once (exactly once while nothing fails); leases with fencing tokens; a dead "
             "worker's jobs run again after the lease (30 s)")
SYSTEMS = (
    _plus("plus", "celery-plus plus+redis://", "redis", PLUS_NOTE),
    _plus("plus-pg", "celery-plus plus+postgresql://", "pg", PLUS_NOTE + "; commit per publish"),
    _plus("plus-sqlite", "celery-plus plus+sqlite:// (embedded)", "sqlite", PLUS_NOTE),
    System("celery", "plain Celery redis:// (acks_late)", "redis", "benchmarks.bench_app",
           False, {
               "solo": _celery("celery", "--pool=solo --concurrency=1"),
               "prefork -c 2": _celery("celery", "--pool=prefork --concurrency=2"),
               "x8": _celery("celery", "--pool=threads --concurrency=8"),
           }, "at least once after the visibility timeout (1 h); no fencing", kind="celery"),
    System("dramatiq", "Dramatiq (Redis broker)", "redis", "benchmarks.dramatiq_app", False, {
        "solo": _fixed("dramatiq", "benchmarks.dramatiq_app", "--processes", "1",
                       "--threads", "1"),
        "x8": _fixed("dramatiq", "benchmarks.dramatiq_app", "--processes", "1",
                     "--threads", "8"),
    }, "at least once: acks late, a dead worker's messages requeued after its heartbeat lapses"),
    System("huey", "Huey (Redis)", "redis", "benchmarks.peers.huey_app", False, {
        "solo": _fixed("huey.bin.huey_consumer", "benchmarks.peers.huey_app.huey", "-w", "1",
                       "-k", "thread", "-q"),
        "x8": _fixed("huey.bin.huey_consumer", "benchmarks.peers.huey_app.huey", "-w", "8",
                     "-k", "thread", "-q"),
    }, "at most once: BRPOP, nothing kept while a task runs"),
    System("pgqueuer", "PgQueuer (PostgreSQL)", "pg", "benchmarks.peers.pgqueuer_app", True, {
        "solo": _fixed("benchmarks.peers.pgqueuer_app"),
    }, "at least once: heartbeats, re-picked after 30 s without one; logged tables"),
    System("procrastinate", "Procrastinate (PostgreSQL)", "pg",
           "benchmarks.peers.procrastinate_app", True, {
               "solo": _fixed("procrastinate", "--app", "benchmarks.peers.procrastinate_app.app",
                              "worker", "--concurrency", "1", "--queues", "bench"),
               "x8": _fixed("procrastinate", "--app", "benchmarks.peers.procrastinate_app.app",
                            "worker", "--concurrency", "8", "--queues", "bench"),
           }, "a dead worker's jobs stay 'doing' until the user's stalled-job task retries them"),
)
#: The other Redis layouts, run when named (``--systems plus,plus-hash,plus-deflate``): the
#: envelope in the job hash (``plus_redis_compact_records = False``) and deflated
#: (``plus_redis_deflate = True``).
LAYOUTS = (
    _plus("plus-hash", "celery-plus plus+redis://, hash layout", "redis", PLUS_NOTE),
    _plus("plus-deflate", "celery-plus plus+redis://, deflated", "redis", PLUS_NOTE),
)
#: PostgreSQL with a prefetch window of 16 per process instead of 4 (claims of up to 16 jobs
#: ahead, each under a lease: docs/benchmarks.md, the claim-ahead decision), run when named.
PREFETCH = (
    _plus("plus-pg-p16", "celery-plus plus+postgresql://, prefetch 16", "pg",
          PLUS_NOTE + "; commit per publish; 16 jobs claimed ahead"),
)
BY_KEY = {system.key: system for system in (*SYSTEMS, *LAYOUTS, *PREFETCH)}


def based(system: System, checkout: str) -> System:
    """``system`` on the celery_plus of another checkout (``--base``), keyed ``base-KEY``."""
    return replace(system, key=f"base-{system.key}", label=f"{system.label} at {checkout}",
                   code=checkout)
