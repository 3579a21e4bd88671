"""Both Redis record layouts under a real worker (prefork, the default pool; every pool takes
its messages from the same claim in the worker's main process): tasks run with their
arguments, a retry continues, a unique duplicate is deduplicated, a failure is a dead letter
the admin shows whole. ``deflated`` (the default: the envelope deflated, in its own key) runs
in every other Redis e2e test too; ``compact`` is ``plus_redis_deflate=False`` in the
publisher, the envelope as published (the worker reads both forms); ``hash`` is
``plus_redis_compact_records=False``, the switch a rolling upgrade from a release before the
compact layout keeps on (the envelope in the hash).
"""

from __future__ import annotations

import pytest
import redis

from celery_plus.admin import Admin, admin_for
from celery_plus.stores.redis.envelope import MARK
from tests.inspectors import inspector_for

from . import proj
from .conftest import wait_until


@pytest.fixture(params=["compact", "deflated", "hash"])
def layout(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def layout_client(prefix: str, layout: str):
    app = proj.make_app(prefix, plus_redis_compact_records=layout != "hash",
                        plus_redis_deflate=layout == "deflated")
    yield app
    app.close()


def test_each_layout_runs_retries_deduplicates_and_dead_letters(
        layout_client, layout, start_worker, view, prefix) -> None:
    start_worker(pool="prefork", concurrency=2,
                 env={"PLUS_TEST_COMPACT": "0" if layout == "hash" else "1"})
    tasks = layout_client.tasks
    text = "é\U0001f600 \x1f\x1e|:;{}" + "x" * 20_000  # odd characters, a long value
    added = tasks["proj.add"].delay(2, 3)
    flaky = tasks["proj.flaky"].delay("k", 3)
    # Running for 3 s: the duplicate below must be sent while it runs, seen from a test
    # process that may starve on a loaded machine.
    held = tasks["proj.unique_running"].delay("same", 3.0)
    wait_until(lambda: (inspector_for(view).job(held.id) or {}).get("st") == "running",
               message="the unique job running")
    duplicate = tasks["proj.unique_running"].delay("same", 3.0)
    failed = tasks["proj.fail"].delay(text)
    # compact: every envelope written by this client is stored in its own key (deflated:
    # deflated there); hash: in the job's hash, as releases before the compact layout read it.
    binary = redis.Redis.from_url(proj.REDIS_URL)
    try:
        stored = binary.get(f"{prefix}:m:{failed.id}")
        in_hash = binary.hget(f"{prefix}:job:{failed.id}", "msg")
        if layout == "deflated":
            assert stored is not None and stored.startswith(MARK) and in_hash is None
        elif layout == "compact":
            assert stored is not None and stored.startswith(b"{") and in_hash is None
        else:
            assert stored is None and in_hash is not None and in_hash.startswith(b"{")
    finally:
        binary.close()
    assert added.get(timeout=30) == 5
    assert flaky.get(timeout=30) == 3
    assert duplicate.deduplicated and duplicate.id == held.id
    assert held.get(timeout=30) == "same"
    wait_until(lambda: (inspector_for(view).job(failed.id) or {}).get("st") == "failed",
               message="the failure dead-lettered")
    with Admin(admin_for(view)) as admin:
        shown = admin.show(failed.id)
    assert shown.args == [text] and shown.summary.exc_type == "ValueError"
    assert shown.raw_message.startswith("{")
