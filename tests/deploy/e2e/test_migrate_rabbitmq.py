"""``celery-plus migrate-queue NAME --legacy-url amqp://…`` end to end (issue 30, point 10): a
plain Celery project (``rabbit_plain``: imports only ``celery``) leaves 120 tasks, 12 of them
with a countdown, in its RabbitMQ queue (one queue and exchange per test, deleted after); the
migration (the CLI, a subprocess) dies right after the store committed its second batch and
before acking it; RabbitMQ gives that batch back; the re-run moves the rest and finds the
given-back batch in the store already; then a ``celery-plus worker`` runs each task exactly
once. Once per store (``broker_kind``; the README's suite runs one: tests/deploy/matrix.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from kombu import Connection, Exchange, Queue

from tests.support import wait_until

from . import rabbit_plain
from .conftest import CELERY_PLUS, ROOT
from .mixed_tasks import runs

TOTAL = 120
BATCH = 10
PLUS_APP = "tests.deploy.e2e.rabbit_plus"

#: A ``celery-plus migrate-queue`` process that dies (``os._exit``, no cleanup, no ack) right
#: after the store committed its second batch, before acking it on RabbitMQ.
CRASHING = """
import os, sys
from celery_plus.queue_migration import amqp
real, calls = amqp._ack, [0]
def crash(batch):
    calls[0] += 1
    if calls[0] == 2:
        os._exit(17)
    real(batch)
amqp._ack = crash
from celery_plus.cli import main
sys.argv = ["celery-plus", *sys.argv[1:]]
main()
"""


@pytest.fixture
def queue(prefix: str) -> Iterator[str]:
    """The test's RabbitMQ queue (and exchange) name; both deleted after the test."""
    name = rabbit_plain.queue_name(prefix)
    yield name
    with Connection(rabbit_plain.AMQP_URL) as conn:
        channel = conn.channel()
        Queue(name, Exchange(name), channel=channel).delete()
        Exchange(name, channel=channel).delete()


def ready(queue: str) -> int:
    with Connection(rabbit_plain.AMQP_URL) as conn:
        return int(Queue(queue, channel=conn.channel()).queue_declare(passive=True)[1])


def migrate(prefix: str, queue: str, *args: str, program: list[str] | None = None
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*(program or CELERY_PLUS), "-A", PLUS_APP, "migrate-queue", queue,
         "--legacy-url", rabbit_plain.AMQP_URL, "--batch-size", str(BATCH), *args],
        cwd=ROOT, env={**os.environ, "PLUS_TEST_PREFIX": prefix}, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, timeout=120)


def test_a_rabbitmq_queue_moves_to_the_store_through_a_crash_and_runs_each_task_once(
        prefix, queue, broker_kind, view, start_worker):
    plain = rabbit_plain.make_app(prefix)
    task = plain.tasks["mixed.run"]
    with plain.producer_or_acquire() as producer:
        sent = [task.apply_async((n,), countdown=1 if n % 10 == 0 else None,
                                 producer=producer).id for n in range(TOTAL)]
    plain.close()
    assert ready(queue) == TOTAL

    dry = migrate(prefix, queue, "--dry-run")
    assert dry.returncode == 0 and f"{TOTAL} messages ready in RabbitMQ" in dry.stdout, dry.stdout
    assert ready(queue) == TOTAL and view.size(queue) == 0

    crashed = migrate(prefix, queue, program=[sys.executable, "-c", CRASHING])
    assert crashed.returncode == 17, crashed.stdout
    # Batch 1 stored and acked; batch 2 stored, not acked: RabbitMQ gives it back.
    wait_until(lambda: ready(queue) == TOTAL - BATCH, message="the unacked batch given back")

    resumed = migrate(prefix, queue)
    assert resumed.returncode == 0, resumed.stdout
    left = TOTAL - BATCH
    assert (f"{left}/{left} moved (new jobs {left - BATCH}, already in the store {BATCH}, "
            "coalesced 0" in resumed.stdout), resumed.stdout
    assert ready(queue) == 0

    start_worker("-Q", queue, app=PLUS_APP, pool="threads", concurrency=4)
    wait_until(lambda: len(runs(prefix)) >= TOTAL, timeout=60, message="every task ran")
    wait_until(lambda: view.size(queue) == 0, message="nothing left to run")
    assert runs(prefix) == dict.fromkeys(sent, 1)
