"""A celery-plus app round-trips tasks under `celery-plus worker` and plain `celery worker`."""

from __future__ import annotations

import pytest

from .conftest import wait_until
from .proj import events


@pytest.mark.parametrize("cli", ["celery-plus", "celery"])
def test_task_round_trip_through_a_real_worker(client, start_worker, prefix, cli):
    worker = start_worker(cli=cli)
    assert client.tasks["proj.add"].delay(2, 3).get(timeout=20) == 5
    client.tasks["proj.mark"].delay(7)
    wait_until(lambda: events(prefix, "mark"), message="mark event")
    assert [e["n"] for e in events(prefix, "mark")] == [7]
    assert "plus+redis://" in worker.log()
