"""``celery-plus migrate-queue NAME --back`` end to end (issue 30, point 5): 50 jobs of a
durable queue (some with a countdown) on a ``plus+redis://`` or ``plus+postgresql://`` store
are moved back onto plain Celery's Redis broker by the CLI (a subprocess); then a real plain
``celery worker`` (``mixed_plain``: imports only ``celery``, on ``redis://``) drains the
restored queue: every task runs exactly once, and its log has no ``KeyError``. And a
``migrate-queue --back`` that crashes between publishing a batch and removing it from the
store duplicates at most that batch, never loses a message.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import redis

from celery_plus.model.admin import WAITING
from celery_plus.queue_migration.back import count
from celery_plus.queue_migration.layout import KombuLayout
from celery_plus.stores.registry import admin_for, open_store
from tests.support import wait_until

from . import mixed_plus
from .conftest import CELERY_PLUS, ROOT
from .mixed_tasks import DURABLE, REDIS_URL, keyprefix, runs

TOTAL = 50
PLUS_APP = "tests.deploy.e2e.mixed_plus"
PLAIN_APP = "tests.deploy.e2e.mixed_plain"

#: A ``celery-plus migrate-queue --back`` process that dies (``os._exit``, no cleanup) right
#: after publishing its second batch on the plain broker, before removing it from the store.
CRASHING = """
import os, sys
from celery_plus.queue_migration import back
real, calls = back._remove, [0]
def crash(admin, rows, tally):
    calls[0] += 1
    if calls[0] == 2:
        os._exit(17)
    real(admin, rows, tally)
back._remove = crash
from celery_plus.cli import main
sys.argv = ["celery-plus", *sys.argv[1:]]
main()
"""


#: Each test once per store (the README's suite runs one of them: tests/deploy/matrix.py).
pytestmark = pytest.mark.parametrize("broker_kind", ["redis", "postgres"], indirect=True)


@pytest.fixture
def store_url(broker_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The test's store for ``mixed_plus`` (here, in the CLI and in workers); the
    PostgreSQL schema is dropped by ``broker_url``."""
    monkeypatch.setenv("PLUS_TEST_MIXED_BROKER", broker_url)
    return broker_url


def publish_jobs(prefix: str, countdown_every: int = 0) -> list[str]:
    """TOTAL jobs of the durable queue in the store (every ``countdown_every``-th with a
    countdown of 3 s); their task ids."""
    plus = mixed_plus.make_app(prefix)
    task = plus.tasks["mixed.run"]
    sent = [task.apply_async((n,), queue=DURABLE, priority=n % 10,
                             countdown=3 if countdown_every and n % countdown_every == 0
                             else None).id
            for n in range(TOTAL)]
    plus.close()
    return sent


def waiting(prefix: str, states: tuple[str, ...] = WAITING) -> int:
    app = mixed_plus.make_app(prefix)
    backend = open_store(app.conf.broker_url.removeprefix("plus+"), app.plus_config())
    admin = admin_for(backend, owns_backend=True)
    try:
        return count(admin, DURABLE, states)
    finally:
        admin.close()
        app.close()


def in_plain(prefix: str) -> int:
    legacy = redis.Redis.from_url(REDIS_URL)
    try:
        layout = KombuLayout(global_keyprefix=keyprefix(prefix))
        return sum(int(legacy.llen(key)) for key in layout.priority_lists(DURABLE))
    finally:
        legacy.close()


def back_cmd(prefix: str, *args: str, program: list[str] | None = None
             ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*(program or CELERY_PLUS), "-A", PLUS_APP, "migrate-queue", DURABLE, "--back", *args],
        cwd=ROOT, env={**os.environ, "PLUS_TEST_PREFIX": prefix}, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, timeout=120)


def drain_with_plain_worker(prefix: str, start_worker, expected_runs: int) -> dict[str, int]:
    worker = start_worker("-Q", DURABLE, cli="celery", app=PLAIN_APP, pool="threads",
                          concurrency=4)
    wait_until(lambda: sum(runs(prefix).values()) >= expected_runs, timeout=60,
               message=f"{expected_runs} runs")
    time.sleep(1)  # a message run twice too many would show by now
    assert in_plain(prefix) == 0
    log = worker.log()
    assert "KeyError" not in log and "delivery_tag" not in log, log
    return runs(prefix)


def test_fifty_jobs_move_back_and_a_plain_worker_runs_each_once(prefix, store_url,
                                                                start_worker):
    sent = publish_jobs(prefix, countdown_every=5)
    assert waiting(prefix) == TOTAL

    dry = back_cmd(prefix, "--dry-run")
    assert dry.returncode == 0 and "50 waiting jobs would move back" in dry.stdout, dry.stdout
    assert waiting(prefix) == TOTAL and in_plain(prefix) == 0

    done = back_cmd(prefix, "--batch-size", "7")
    assert done.returncode == 0, done.stdout
    assert "50/50 moved back (messages 50, of them scheduled 10)" in done.stdout, done.stdout
    assert waiting(prefix) == 0 and in_plain(prefix) == TOTAL
    assert waiting(prefix, ("canceled",)) == 0  # no record a forward migration would match
    again = back_cmd(prefix)
    assert again.returncode == 0 and "nothing to move back" in again.stdout, again.stdout

    assert drain_with_plain_worker(prefix, start_worker, TOTAL) == dict.fromkeys(sent, 1)


def test_a_crash_between_publish_and_remove_duplicates_at_most_a_batch(prefix, store_url,
                                                                      start_worker):
    sent = publish_jobs(prefix)
    crashed = back_cmd(prefix, "--batch-size", "10",
                       program=[sys.executable, "-c", CRASHING])
    assert crashed.returncode == 17, crashed.stdout
    # Batch 1 published and removed; batch 2 published, still waiting in the store.
    assert in_plain(prefix) == 20 and waiting(prefix) == TOTAL - 10

    resumed = back_cmd(prefix, "--batch-size", "10")  # takes over the dead run's lock
    assert resumed.returncode == 0, resumed.stdout
    assert "40/40 moved back" in resumed.stdout, resumed.stdout
    assert waiting(prefix) == 0 and in_plain(prefix) == TOTAL + 10

    ran = drain_with_plain_worker(prefix, start_worker, TOTAL + 10)
    assert set(ran) == set(sent)  # nothing lost
    assert sorted(ran.values()).count(2) == 10 and sum(ran.values()) == TOTAL + 10
