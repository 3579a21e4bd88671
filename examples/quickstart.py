"""celery-plus in one minute: a real worker, uniqueness, per-key concurrency, a dead letter.

Run from the repository root with Redis on 127.0.0.1:6379:

    python examples/quickstart.py

It starts a ``celery-plus worker`` for ``examples.quickstart_app``, enqueues work, prints what
each extension did, stops the worker and exits 0.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("QUICKSTART_PREFIX", f"quickstart-{uuid.uuid4().hex[:6]}")

from examples import quickstart_app as qs  # noqa: E402


def wait_for(predicate, timeout: float = 30.0):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not (value := predicate()):
        if time.monotonic() > deadline:
            raise SystemExit("quickstart: timed out")
        time.sleep(0.05)
    return value


def main() -> int:
    log = open(ROOT / "quickstart-worker.log", "wb")  # noqa: SIM115
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery_plus.cli", "worker", "-A", "examples.quickstart_app",
         "--pool=threads", "--concurrency=6", "--loglevel=WARNING", "--without-gossip",
         "--without-mingle"],
        cwd=ROOT, env=dict(os.environ), stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        print("1. uniqueness: 20 duplicate webhook deliveries while the first is processed")
        first = qs.handle_webhook.delay("evt-42")
        dups = [qs.handle_webhook.delay("evt-42") for _ in range(19)]
        coalesced = sum(1 for r in dups if r.deduplicated and r.id == first.id)
        first.get(timeout=30)
        print(f"   {coalesced} of 19 duplicates coalesced into {first.id[:8]}; "
              f"handler ran {qs.count('webhook')} time(s)")

        print("2. per-key concurrency: 3 customers x 4 reports, at most 1 running per customer")
        reports = [qs.build_report.delay(c, n) for c in ("acme", "globex", "initech")
                   for n in range(4)]
        for r in reports:
            r.get(timeout=60)
        print(f"   12 reports done; most reports running at once for one customer: "
              f"{qs.max_parallel()}")

        print("3. dead letters: a job that always fails")
        bad = qs.charge_card.delay("card-0000")
        wait_for(lambda: qs.dead_letter(bad.id))
        record = qs.dead_letter(bad.id)
        print(f"   {bad.id[:8]} dead-lettered: {record['reason']}: "
              f"{record['etype']}: {record['emsg']}")
    finally:
        worker.terminate()
        worker.wait(timeout=30)
        log.close()
        qs.cleanup()
    print("done (worker log: quickstart-worker.log)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
