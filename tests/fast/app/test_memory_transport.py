"""``plus+memory://``: the in-process store as a transport, with a worker in this process.

A Celery worker in a thread of the test (``start_worker``) on ``plus+memory://<name>``, on
Celery's event loop: tasks, ETA, retries, remote control replies and ``inspect scheduled``,
dead letters read by the admin; stores named alike are one store, others apart; a prefork
pool is refused (its processes could not share the store). No server, no file.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from celery.contrib.testing import tasks  # noqa: F401  (celery.ping, for start_worker)
from celery.contrib.testing.worker import start_worker
from celery.exceptions import ImproperlyConfigured

from celery_plus import Celery, admin
from celery_plus.stores.memory.state import forget_named
from tests.support import wait_until


@pytest.fixture
def app() -> Iterator[Celery]:
    name = f"m{uuid.uuid4().hex[:10]}"
    app = Celery("mem", broker=f"plus+memory://{name}", backend="cache+memory://",
                 set_as_current=False)
    app.conf.update(worker_hijack_root_logger=False, plus_poll_interval=0.2)
    yield app
    app.close()
    forget_named(name)


def test_a_threads_worker_runs_tasks_etas_and_retries_and_answers_remote_control(
        app: Celery) -> None:
    calls: list[int] = []

    @app.task(name="mem.add")
    def add(a: int, b: int) -> int:
        return a + b

    @app.task(name="mem.flaky", bind=True, max_retries=3)
    def flaky(self: Any) -> int:
        calls.append(1)
        if len(calls) < 3:
            raise self.retry(countdown=0.1)
        return len(calls)

    with start_worker(app, pool="threads", concurrency=2, perform_ping_check=True) as worker:
        assert add.delay(2, 3).get(timeout=10) == 5
        assert add.apply_async((1, 1), countdown=0.5).get(timeout=10) == 2
        assert flaky.delay().get(timeout=10) == 3
        later = add.apply_async((0, 0), countdown=60)
        scheduled = app.control.inspect(destination=[worker.hostname], timeout=2).scheduled()
        assert [e["request"]["id"] for e in (scheduled or {})[worker.hostname]] == [later.id]
        assert app.control.ping(destination=[worker.hostname], timeout=2) == [
            {worker.hostname: {"ok": "pong"}}]


def test_a_failure_is_a_dead_letter_the_admin_lists(app: Celery) -> None:
    @app.task(name="mem.fail")
    def fail() -> None:
        raise ValueError("no")

    with start_worker(app, pool="solo", perform_ping_check=False):
        result = fail.delay()
        with pytest.raises(ValueError):
            result.get(timeout=10)
        wait_until(lambda: admin.jobs(app, "failed").items, timeout=10,
                   message="the dead letter")
    [row] = admin.jobs(app, "failed").items
    assert (row.id, row.exc_type) == (result.id, "ValueError")


def test_connections_of_one_name_share_a_store_and_other_names_do_not(app: Celery) -> None:
    other = Celery("other", broker=f"{app.conf.broker_url}-other", set_as_current=False)
    try:
        app.send_task("mem.x", queue="q")
        with app.connection_for_read() as conn, other.connection_for_read() as elsewhere:
            assert conn.default_channel.backend.size("q") == 1
            assert elsewhere.default_channel.backend.size("q") == 0
    finally:
        other.close()
        forget_named(str(other.conf.broker_url).partition("://")[2])


def test_a_prefork_worker_is_refused(app: Celery) -> None:
    with pytest.raises(ImproperlyConfigured, match=r"in-process store.*solo.*threads"):
        app.Worker(pool="prefork", concurrency=1, hostname=f"refused@{uuid.uuid4().hex}")
