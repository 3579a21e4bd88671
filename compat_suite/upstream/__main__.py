"""``python -m compat_suite.upstream``: Celery's integration suite, plain Redis vs celery-plus.

    python -m compat_suite.upstream                                  # plus+redis vs a plain run now
    python -m compat_suite.upstream --broker plus+sqlite --broker plus+postgresql
    python -m compat_suite.upstream --module test_inspect.py --module test_tasks.py
    python -m compat_suite.upstream --baseline                       # vs the stored baseline
    python -m compat_suite.upstream --broker redis --save-baseline   # refresh the baseline

Each run gets its own ``redis-server`` (result backend, the tasks' Redis, Redis brokers), its
own PostgreSQL schema or SQLite file. Prints, per broker, the counts and every test whose
outcome differs from the reference; exits 1 if any test that passes on the reference does
not pass on a broker under test.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from .outcomes import Run, compare, summary
from .runner import EXCLUDED, run_suite
from .servers import DEFAULT_POSTGRES, broker_for, drop_schema, redis_server
from .source import installed_celery, suite_source

BASELINES = Path(__file__).parent / "baselines"
REFERENCE = "redis"


def baseline_path(version: str) -> Path:
    return BASELINES / f"celery-{version}.json"


def run_one(name: str, args: argparse.Namespace, source: Path, version: str,
            out: Path) -> Run:
    workspace = out / name.replace("+", "-").replace("/", "_").replace(":", "")
    with redis_server(workspace / "redis") as port:
        broker = broker_for(name, port, workspace, args.postgres)
        print(f"running Celery {version}'s t/integration on {broker.url} "
              f"(log: {workspace / 'pytest.log'})", flush=True)
        try:
            run = run_suite(source, broker, port, workspace / "suite", args.module, version,
                            args.pytest_args, log=workspace / "pytest.log")
        finally:
            drop_schema(broker)
    run.save(workspace / "outcomes.json")
    print(f"  {run.broker}: {run.counts()} in {run.time_text()}", flush=True)
    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m compat_suite.upstream",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--broker", action="append", default=[],
                        help="plus+redis (default), plus+sqlite, plus+postgresql, redis, or a URL")
    parser.add_argument("--module", action="append", default=[],
                        help="a module of t/integration (default: all but "
                             f"{', '.join(EXCLUDED)})")
    parser.add_argument("--baseline", action="store_true",
                        help="compare with the stored baseline instead of a plain run now")
    parser.add_argument("--save-baseline", action="store_true",
                        help="store the plain redis:// run as the baseline of this Celery")
    parser.add_argument("--postgres", default=DEFAULT_POSTGRES,
                        help=f"PostgreSQL for plus+postgresql (default {DEFAULT_POSTGRES})")
    parser.add_argument("--out", type=Path, default=None,
                        help="directory for workspaces, logs and outcomes (default: a temp dir)")
    parser.add_argument("--celery-version", default=None,
                        help="suite version (default: the installed Celery's)")
    parser.add_argument("pytest_args", nargs="*", help="after --: passed on to pytest")
    args = parser.parse_args(argv)

    version = args.celery_version or installed_celery()
    if version != installed_celery():
        print(f"warning: running Celery {version}'s suite against installed Celery "
              f"{installed_celery()}", file=sys.stderr)
    source = suite_source(version)
    out = args.out or Path(tempfile.mkdtemp(prefix="celery-plus-upstream-"))
    out.mkdir(parents=True, exist_ok=True)
    brokers = args.broker or ["plus+redis"]
    started = time.monotonic()

    if args.baseline:
        reference = Run.load_file(baseline_path(version)).restricted(args.module)
    else:
        reference = run_one(REFERENCE, args, source, version, out)
        if args.save_baseline:
            if args.module:
                parser.error("--save-baseline stores a run of the whole suite: drop --module")
            reference.save(baseline_path(version))
            print(f"baseline stored: {baseline_path(version)}")
    regressions = 0
    reports = []
    for name in brokers:
        if name == REFERENCE and not args.baseline:
            continue
        run = run_one(name, args, source, version, out)
        expected = reference
        if args.pytest_args:  # e.g. -k: compare the tests that ran, not those deselected
            expected = reference.only(set(run.outcomes))
        regressions += sum(d.regression for d in compare(expected, run))
        reports.append(summary(expected, run))
    print(f"\nCelery {version} t/integration, reference {reference.broker}: "
          f"{reference.counts()} ({reference.time_text()})")
    for report in reports:
        print(report)
    print(f"\n{regressions} regression(s); {time.monotonic() - started:.0f}s; output in {out}")
    return 1 if regressions else 0


if __name__ == "__main__":
    sys.exit(main())
