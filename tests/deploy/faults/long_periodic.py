"""Issue #16 acceptance 1, the long run: three ``celery-plus beat`` processes for 10 minutes
of a 5-second schedule, the leader SIGKILLed twice (each time a new beat process is started
in its place, as a supervisor would), and a worker running the ticks; on one store. Each kill
is placed at the worst moment for the takeover bound: right after the leader renewed its role
lease, and at most a renewal period (lease/6) and 0.3 s before a tick it would have fired
(``periodic_checks.kill_before_tick``).

    python -m tests.deploy.faults.long_periodic --store redis [--minutes 10 --every 5 --lease 10]

Prints one JSON report (and appends it to ``PLUS_LONG_REPORT``, default
``.long-periodic.jsonl``): ticks enqueued (from the beat logs: each firing is logged by the
process that fired it), duplicates, ticks missing between the first and the last, the longest
gap between two enqueues against the bound (lease + one interval), the runs the worker made
(each tick must run once), and for each kill: how long before the tick's due time it came,
whether it followed a renewal, and the gap it left between the last tick before it and the
first after it.
Exit status 1 if a check fails. Figures: docs/schedules.md. The CI variant is
``tests/deploy/e2e/test_periodic.py``.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections import Counter

from celery_plus.beat import TRY_SHARE, tick_id
from tests.deploy.e2e.periodic_checks import Kill, fired, kill_before_tick, leader, tick_report
from tests.support import wait_until

from .long_deployment import deployment, report, store_arguments


def run(store: str, minutes: float, every: float, lease: float, kills: int) -> dict[str, object]:
    every_ms = round(every * 1000)
    with deployment(store, PLUS_TEST_BEAT_EVERY=str(every),
                    PLUS_TEST_BEAT_LEASE=str(lease)) as dep:
        dep.worker(pool="solo", concurrency=1)
        for _ in range(3):
            dep.beat()
        started = time.time()
        end = started + minutes * 60
        kill_at = [started + minutes * 60 * (k + 1) / (kills + 1) for k in range(kills)]
        killed: list[tuple[float, Kill]] = []
        for moment in kill_at:
            time.sleep(max(moment - time.time(), 0))
            victim = leader(dep.beats)
            if victim is None:
                raise SystemExit("no leader to kill")
            kill = kill_before_tick(victim, dep.view, every_ms, before_ms=300,
                                    after_renewal_ms=round(lease * TRY_SHARE * 1000) + 100)
            killed.append((kill.at_ms / 1000, kill))
            dep.beat()  # a supervisor starts another
        time.sleep(max(end - time.time(), 0))
        for beat in dep.beats:
            beat.stop()
        logs = {b.log_path.name: b.log() for b in dep.beats}
        ticks = fired(logs)
        report = tick_report(ticks, every_ms)
        with contextlib.suppress(AssertionError):  # the report says what is missing
            wait_until(lambda: len(dep.events("tick")) >= report.ticks, timeout=120,
                       message="the worker ran every tick")
        runs = dep.events("tick")
        run_counts = Counter(str(r["id"]) for r in runs)
        expected = {tick_id("tick", t.due_ms) for t in ticks}
        kills = []
        for at, k in killed:
            last = max((t.at for t in ticks if t.at <= at), default=at)
            after = min((t.at for t in ticks if t.at > at), default=float("nan"))
            # The proof's terms (docs/schedules.md): gap = (kill - last tick) + the lease
            # left at the kill + (lapse -> the successor's first tick).
            kills.append({"last_tick_to_kill_s": round(at - last, 2),
                          "before_due_s": round((k.due_ms - k.at_ms) / 1000, 2),
                          "after_renewal": k.just_renewed,
                          "lease_left_s": round((k.lapses_ms - k.at_ms) / 1000, 2),
                          "lapse_to_next_tick_s": round(after - k.lapses_ms / 1000, 2),
                          "gap_s": round(after - last, 2)})
        entry = next(s for s in dep.view.schedules() if s.name == "tick")
        return {
            "scenario": "beat: 3 processes, leader SIGKILLed", "store": store,
            "minutes": minutes, "every_s": every, "lease_s": lease, "kills": len(killed),
            "ticks_enqueued": report.ticks, "store_fired_count": entry.fired,
            "duplicates": report.duplicates, "missing": report.missing,
            "longest_gap_s": report.longest_gap_s, "gap_bound_s": lease + every,
            "enqueued_by_process": report.by_log,
            "kills_detail": kills,
            "runs": len(runs), "run_twice": sorted(i for i, n in run_counts.items() if n > 1),
            "runs_missing": len(expected - set(run_counts)),
            "ok": (report.ok() and report.longest_gap_s <= lease + every
                   and entry.fired == report.ticks and set(run_counts) == expected
                   and all(n == 1 for n in run_counts.values())),
        }


def main(argv: list[str] | None = None) -> int:
    parser = store_arguments(__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--every", type=float, default=5.0)
    parser.add_argument("--lease", type=float, default=10.0)
    parser.add_argument("--kills", type=int, default=2)
    args = parser.parse_args(argv)
    result = run(args.store, args.minutes, args.every, args.lease, args.kills)
    return report(result, ".long-periodic.jsonl")


if __name__ == "__main__":
    sys.exit(main())
