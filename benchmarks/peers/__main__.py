"""``python -m benchmarks.peers [--jobs 3000] [--rounds 3] [--systems plus,huey,...]
[--columns solo,x8] [--batch-fill] [--base CHECKOUT]``."""

from __future__ import annotations

import argparse
import json
import os
from dataclasses import asdict

from .report import print_report
from .rounds import run_round
from .servers import private_servers
from .systems import BY_KEY, COLUMNS, SYSTEMS, based


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="celery-plus against its peers (issue #29)")
    parser.add_argument("--jobs", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--systems", default=",".join(s.key for s in SYSTEMS))
    parser.add_argument("--columns", default=",".join(COLUMNS),
                        help="the drain columns to measure (enqueue and batch always are)")
    parser.add_argument("--batch-fill", action="store_true",
                        help="fill every queue with the batch enqueue where there is one")
    parser.add_argument("--json", help="also write every round's figures to this file")
    parser.add_argument("--base", help="a checkout: each celery-plus system runs on its "
                        "celery_plus too, in the same rounds (head/base ratios)")
    args = parser.parse_args(argv)
    systems = [BY_KEY[key] for key in args.systems.split(",")]
    columns = tuple(args.columns.split(","))
    unknown = sorted(set(columns) - set(COLUMNS))
    if unknown:
        parser.error(f"--columns: unknown {', '.join(unknown)} (known: {', '.join(COLUMNS)})")
    if args.base:
        systems += [based(s, args.base) for s in systems if s.kind.startswith("plus")]
    pg = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432/test")
    with private_servers(pg) as servers:
        rounds = [run_round(r, systems, servers, args.jobs, columns,
                            args.batch_fill) for r in range(args.rounds)]
    print_report(rounds, systems, args.jobs)
    if args.json:
        with open(args.json, "w") as out:
            json.dump([asdict(r) for r in rounds], out, indent=1)


if __name__ == "__main__":
    main()
