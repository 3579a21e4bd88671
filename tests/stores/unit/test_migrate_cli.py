"""``celery-plus migrate-queue``: refusals that name the setting or argument and the fix."""

from __future__ import annotations

import uuid

import pytest
import redis
from click.testing import CliRunner

from celery_plus.cli import _celery_group

REDIS_URL = "redis://127.0.0.1:6379/0"


@pytest.fixture
def invoke(monkeypatch: pytest.MonkeyPatch):
    import importlib

    from tests.deploy.e2e import mixed_plus

    prefix = f"mcli{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("PLUS_TEST_PREFIX", prefix)
    # The module's app is built at import, on the prefix of whichever test imported it first
    # in this process: built again here on this test's own.
    importlib.reload(mixed_plus)

    def run(*args: str):
        return CliRunner().invoke(_celery_group(), ["-A", "tests.deploy.e2e.mixed_plus", *args],
                                  catch_exceptions=False)

    yield run
    client = redis.Redis.from_url(REDIS_URL)
    for key in client.scan_iter(f"{prefix}:*"):
        client.delete(key)
    client.close()


def test_a_queue_not_in_plus_durable_queues_is_refused(invoke) -> None:
    result = invoke("migrate-queue", "legacy")
    assert result.exit_code == 2
    assert "not in plus_durable_queues" in result.output
    assert "Add 'legacy' to plus_durable_queues" in result.output


def test_a_remote_control_queue_is_refused(invoke) -> None:
    result = invoke("migrate-queue", "celery.pidbox")
    assert result.exit_code == 2 and "not a task queue" in result.output


def test_bad_numbers_name_the_option(invoke) -> None:
    result = invoke("migrate-queue", "durable", "--batch-size", "0")
    assert result.exit_code == 2 and "--batch-size" in result.output


def test_an_empty_queue_has_nothing_to_move(invoke) -> None:
    dry = invoke("migrate-queue", "durable", "--dry-run")
    assert dry.exit_code == 0 and "dry run, nothing changed. 0 legacy messages" in dry.output
    result = invoke("migrate-queue", "durable")
    assert result.exit_code == 0 and "durable: nothing to move" in result.output


def test_back_refuses_the_unacked_options(invoke) -> None:
    result = invoke("migrate-queue", "durable", "--back", "--include-unacked")
    assert result.exit_code == 2 and "not with --back" in result.output


def test_back_takes_a_queue_no_longer_durable(invoke) -> None:
    """The rollback runs after the queue left plus_durable_queues: it is not refused."""
    dry = invoke("migrate-queue", "legacy", "--back", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert "dry run, nothing changed. 0 waiting jobs would move back" in dry.output
    result = invoke("migrate-queue", "legacy", "--back")
    assert result.exit_code == 0 and "legacy: nothing to move back" in result.output


def test_back_says_the_queue_is_still_durable(invoke) -> None:
    result = invoke("migrate-queue", "durable", "--back")
    assert result.exit_code == 0 and "still stores 'durable' durably" in result.output


AMQP_URL = "amqp://guest:guest@127.0.0.1:5672//"


def test_a_rabbitmq_source_refuses_back_and_the_unacked_options(invoke) -> None:
    back = invoke("migrate-queue", "durable", "--back", "--legacy-url", AMQP_URL)
    assert back.exit_code == 2 and "not an amqp:// URL" in back.output
    unacked = invoke("migrate-queue", "durable", "--include-unacked", "--legacy-url", AMQP_URL)
    assert unacked.exit_code == 2 and "RabbitMQ gives back" in unacked.output


@pytest.fixture
def rabbit(monkeypatch: pytest.MonkeyPatch):
    """The CLI's ``-A tests.deploy.e2e.rabbit_plus`` app on a prefix of this test's (so a
    RabbitMQ queue name of its own); its store keys deleted after."""
    import importlib

    from tests.deploy.e2e import rabbit_plus

    prefix = f"mcli{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("PLUS_TEST_PREFIX", prefix)
    app = importlib.reload(rabbit_plus).app

    def run(*args: str):
        return CliRunner().invoke(_celery_group(), ["-A", "tests.deploy.e2e.rabbit_plus",
                                                    *args], catch_exceptions=False)

    yield app, run
    app.close()
    client = redis.Redis.from_url(REDIS_URL)
    for key in client.scan_iter(f"{prefix}:*"):
        client.delete(key)
    client.close()


def test_a_rabbitmq_queue_that_does_not_exist_is_named(rabbit) -> None:
    app, run = rabbit
    name = app.conf.task_default_queue
    result = run("migrate-queue", name, "--legacy-url", AMQP_URL)
    assert result.exit_code == 1 and f"RabbitMQ has no queue {name!r}" in result.output


def test_one_move_of_a_rabbitmq_queue_at_a_time(rabbit) -> None:
    """The store's lease of ``migrate-queue:NAME`` held by a live process elsewhere: refused,
    nothing taken from RabbitMQ."""
    from kombu import Connection, Queue

    from celery_plus.stores.registry import open_store

    app, run = rabbit
    name = app.conf.task_default_queue
    backend = open_store(app.conf.broker_url.removeprefix("plus+"), app.plus_config())
    with Connection(AMQP_URL) as conn:
        queue = Queue(name, channel=conn.channel(), auto_delete=False)
        queue.declare()
        conn.Producer().publish({"n": 1}, routing_key=name)
        try:
            assert backend.lead(f"migrate-queue:{name}", "elsewhere:1:x", 60_000)
            result = run("migrate-queue", name, "--legacy-url", AMQP_URL)
            assert result.exit_code == 1, result.output
            assert "another migrate-queue moves" in result.output
            assert "elsewhere:1:x" in result.output
            assert queue.queue_declare(passive=True)[1] == 1
        finally:
            queue.delete()
            backend.close()
