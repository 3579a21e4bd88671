"""The medians over the rounds, and celery-plus/peer ratios taken within each round."""

from __future__ import annotations

import statistics

from .rounds import Round
from .systems import COLUMNS, System

METRICS = ("enqueue", "batch", *COLUMNS)
# (celery-plus configuration, the peers it is compared with)
PAIRS = (
    ("plus", ("celery", "dramatiq", "huey")),
    ("plus-pg", ("pgqueuer", "procrastinate")),
    ("plus-sqlite", ("celery",)),
    ("plus", ("plus-hash", "plus-deflate")),
    ("plus-pg-p16", ("plus-pg", "pgqueuer")),
)


def _median(values: list[float]) -> str:
    return f"{statistics.median(values):,.0f}" if values else "-"


def _rates(rounds: list[Round], key: str, metric: str) -> list[float]:
    return [r.figures[key].rates[metric] for r in rounds
            if key in r.figures and metric in r.figures[key].rates]


def ratios(rounds: list[Round], ours: str, peer: str, metric: str,
           theirs: str | None = None) -> list[float]:
    """ours/peer of ``metric`` (the peer's ``theirs``) in each round that measured both."""
    out = []
    for r in rounds:
        a, b = r.figures.get(ours), r.figures.get(peer)
        if a and b and metric in a.rates and (theirs or metric) in b.rates:
            out.append(a.rates[metric] / b.rates[theirs or metric])
    return out


def _ratio_text(values: list[float]) -> str:
    each = ", ".join(f"{v:.2f}" for v in values)
    return f"{statistics.median(values):.2f}x ({each})"


def print_report(rounds: list[Round], systems: list[System], jobs: int) -> None:
    print(f"{jobs} counted no-op jobs (one Redis INCR each), one worker process, "
          f"{len(rounds)} interleaved rounds; medians, jobs per second")
    for i, r in enumerate(rounds):
        print(f"round {i + 1}: load average {r.load[0]:.2f} -> {r.load[1]:.2f}; "
              f"order {', '.join(r.order)}")
    print("| system | enqueue, one call | batch enqueue | drain solo | drain prefork -c 2 "
          "| drain x8 | guarantee |")
    print("|---|---|---|---|---|---|---|")
    for s in systems:
        cells = [_median(_rates(rounds, s.key, m)) for m in METRICS]
        print(f"| {s.label} | {' | '.join(cells)} | {s.guarantee} |")
    keys = {s.key for s in systems}
    pairs = [*PAIRS, *((s.key, (f"base-{s.key}",)) for s in systems if s.kind.startswith("plus"))]
    print("\nratios celery-plus/peer within each round: median (each round)")
    for ours, peers in pairs:
        for peer in (p for p in peers if {ours, p} <= keys):
            for metric in METRICS:
                found = ratios(rounds, ours, peer, metric)
                if found:
                    print(f"  {ours}/{peer} {metric}: {_ratio_text(found)}")
    for s in (s for s in systems if s.kind.startswith("plus")):
        found = ratios(rounds, s.key, s.key, "prefork -c 2", "solo")
        if found:
            print(f"  {s.key} prefork -c 2 / own solo: {_ratio_text(found)}")
    print("\nRedis store server per job while enqueuing and draining (INFO commandstats and "
          "stats, medians): round trips (requests read) / script calls / other commands (those "
          "inside scripts too) / server µs")
    for s in (s for s in systems if s.store == "redis"):
        cells = []
        for column in ("enqueue", "batch", *COLUMNS):
            calls = [r.figures[s.key].calls[column] for r in rounds
                     if s.key in r.figures and column in r.figures[s.key].calls]
            if calls:
                cells.append(f"{column} {statistics.median(c.trips for c in calls):.2f} / "
                             f"{statistics.median(c.scripts for c in calls):.2f} / "
                             f"{statistics.median(c.commands for c in calls):.2f} / "
                             f"{statistics.median(c.server_us for c in calls):.1f}")
        print(f"  {s.label}: {'; '.join(cells)}")
