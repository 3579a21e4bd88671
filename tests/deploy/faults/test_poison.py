"""Poison: failure details no store takes as they are, and tasks that kill their process.

Tasks raise exceptions whose text holds a lone surrogate (a file name from ``os.listdir``),
a NUL, or 1 MB; others leave with ``os._exit`` or a segfault (``max_deliveries=2``). Plain
jobs run beside them, so their acks share settle batches with the poison. Every poison job
ends as a dead letter (the exiting ones after two deliveries), every plain job completes
once, no worker exits, and nothing is left held.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.inspectors import inspector_for

from .app import POISON_DELIVERIES
from .harness import DIED, Deployment, check

STORES = ["redis", "postgres", "sqlite"]
DETAILS = ("surrogate", "nul", "huge")
DYING = ("exit", "segfault")


def run_poison(deployment: Deployment) -> None:
    workers = [deployment.start_worker(concurrency=2), deployment.start_worker(concurrency=2)]
    for round_ in range(2):
        for kind in DETAILS:
            deployment.publish("fault.poison", f"{kind}{round_}", kind, dead=True)
        for n in range(5):
            deployment.publish("fault.work", f"w{round_}-{n}", 0.05)
    for kind in DYING:
        deployment.publish("fault.poison", kind, kind, dead=True)
    report = deployment.finish("odd details twice each; os._exit and a segfault")
    runs = {label: sum(r.label == label for r in deployment.runs()) for label in DYING}
    assert runs == dict.fromkeys(DYING, POISON_DELIVERIES), runs
    for label in deployment.expected_dead:
        record = inspector_for(deployment.view).job(deployment.jobs[label]) or {}
        assert record.get("st") == "failed", (label, record)
        if label.startswith(DETAILS):
            assert record.get("reason") == "task failed", (label, record.get("reason"))
            assert record.get("etype", "").endswith("ValueError"), (label, record)
        else:
            assert record.get("reason") == "delivery limit", (label, record.get("reason"))
    for worker in workers:
        assert worker.proc.poll() is None, worker.log()[-3000:]
        assert "Unrecoverable error" not in worker.log()
    check(report, allow_twice=(DIED,))


@pytest.mark.parametrize("store", STORES)
def test_poison_details_and_dying_tasks(deploy: Callable[..., Deployment], store: str) -> None:
    run_poison(deploy("poison", store, vt=3.0))
