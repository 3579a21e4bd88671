"""A celery-plus app round-trips tasks under `celery-plus worker` and plain `celery worker`,
on each durable store (``plus+redis://``, ``plus+sqlite:///`` and ``plus+postgresql://``); the
job record reads the same on every store.
"""

from __future__ import annotations

import pytest

from tests.inspectors import inspector_for

from .conftest import wait_until
from .proj import events


@pytest.mark.parametrize("cli", ["celery-plus", "celery"])
def test_task_round_trip_through_a_real_worker(client, start_worker, prefix, view,
                                               broker_kind, cli):
    inspect = inspector_for(view)
    worker = start_worker(cli=cli)
    result = client.tasks["proj.add"].delay(2, 3)
    assert result.get(timeout=20) == 5
    # The ack is a batched settle: flushed with the next claim or by the keeper thread.
    record = wait_until(lambda: (r := inspect.job(result.id)) and r["st"] == "completed" and r,
                        message="add completed in the store")
    assert record["name"] == "proj.add" and record["q"] == "celery", record
    assert record["dl"] == "1" and record["tok"] == "1", record
    client.tasks["proj.mark"].delay(7)
    wait_until(lambda: events(prefix, "mark"), message="mark event")
    assert [e["n"] for e in events(prefix, "mark")] == [7]
    assert {"redis": "plus+redis://", "sqlite": "plus+sqlite:///",
            "postgres": "plus+postgresql://"}[broker_kind] in worker.log()
