"""Mixed deployment on one Redis (issue 6, acceptance 2): an unmodified plain Celery worker
(``python -m celery``, on ``redis://``) serves the legacy queue while a ``celery-plus worker``
(on ``plus+redis://``, ``plus_durable_queues=["durable"]``) serves the durable one; and a
celery-plus worker consumes what plain Celery clients put in a legacy queue, with kombu's
ack semantics. The apps are ``mixed_plain`` (imports only ``celery``) and ``mixed_plus``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis

from tests.inspectors import inspector_for
from tests.support import wait_until

from . import mixed_plain, mixed_plus
from .mixed_tasks import DURABLE, LEGACY, REDIS_URL, hosts, keyprefix, order, runs

PLAIN_APP = "tests.deploy.e2e.mixed_plain"
PLUS_APP = "tests.deploy.e2e.mixed_plus"


@pytest.fixture
def apps(prefix: str) -> Iterator[tuple[Any, Any]]:
    """(celery-plus client, plain Celery client) of the test."""
    plus, plain = mixed_plus.make_app(prefix), mixed_plain.make_app(prefix)
    yield plus, plain
    for app in (plus, plain):
        # Celery's close() drops the connection pool without closing it, and the ping's reply
        # wait leaves a pooled Redis channel in BRPOP, which kombu's after-fork cleanup in
        # any process forked later from this pytest process would read: close them here.
        if app._pool is not None:
            app._pool.force_close_all()
        app.close()


def kombu_state(prefix: str, queue: str) -> tuple[int, int]:
    """(messages in the queue's kombu lists, entries in kombu's unacked hash)."""
    client = redis.Redis.from_url(REDIS_URL)
    try:
        from celery_plus.queue_migration.layout import KombuLayout

        layout = KombuLayout(global_keyprefix=keyprefix(prefix))
        pending = sum(int(client.llen(key)) for key in layout.priority_lists(queue))
        return pending, int(client.hlen(layout.unacked))
    finally:
        client.close()


def pinged(app: Any, hostname_start: str) -> bool:
    replies = app.control.ping(timeout=1.0)
    return any(name.startswith(hostname_start) for reply in replies for name in reply)


def test_plain_and_plus_workers_share_one_redis_each_job_once_on_its_worker(
        prefix, start_worker, apps, view):
    inspect = inspector_for(view)
    plus, plain = apps
    start_worker("-Q", LEGACY, app=PLAIN_APP, cli="celery")  # hostname w0-...
    start_worker("-Q", DURABLE, app=PLUS_APP)  # hostname w1-...
    legacy: list[str] = []
    durable: list[str] = []
    for n in range(400):
        legacy.append(plus.tasks["mixed.run"].apply_async((n,), queue=LEGACY).id)
        durable.append(plus.tasks["mixed.run"].apply_async((n,), queue=DURABLE).id)
    for n in range(200):  # a client not yet swapped keeps publishing to the legacy queue
        legacy.append(plain.tasks["mixed.run"].apply_async((n,), queue=LEGACY).id)

    wait_until(lambda: len(runs(prefix)) >= 1000, timeout=90, message="1,000 jobs ran")
    # Nothing left that could run again: legacy lists and unacked hash empty, every
    # durable job completed in the store.
    wait_until(lambda: kombu_state(prefix, LEGACY) == (0, 0), message="legacy queue drained")
    wait_until(lambda: len(set(inspect.ids_in_state("completed", 2000)) & set(durable)) == 400,
               message="durable jobs completed in the store")
    assert runs(prefix) == {task_id: 1 for task_id in legacy + durable}
    where = hosts(prefix)
    assert {where[t].split("-")[0] for t in legacy} == {"w0"}, "legacy jobs: plain worker"
    assert {where[t].split("-")[0] for t in durable} == {"w1"}, "durable jobs: plus worker"
    assert not any(inspect.job(t) for t in legacy[::50]), "legacy jobs never enter the store"
    # Remote control: the swapped app's broadcasts reach both kinds of worker; the plain
    # app's reach the plain worker, as before.
    assert wait_until(lambda: pinged(plus, f"w1-{prefix}") and pinged(plus, f"w0-{prefix}"),
                      message="both workers answer the celery-plus app")
    assert wait_until(lambda: pinged(plain, f"w0-{prefix}"), message="plain worker answers")


def test_a_plus_worker_consumes_plain_celery_messages_from_a_legacy_queue(
        prefix, start_worker, apps, view):
    plus, plain = apps
    legacy = [plain.tasks["mixed.run"].apply_async((n,), queue=LEGACY, priority=n % 10).id
              for n in range(60)]
    priority = {task_id: n % 10 for n, task_id in enumerate(legacy)}
    client = redis.Redis.from_url(REDIS_URL)
    client.lpush(f"{keyprefix(prefix)}{LEGACY}", b"\xffnot a kombu message")
    client.close()
    start_worker("-Q", f"{LEGACY},{DURABLE}", app=PLUS_APP)
    durable = [plus.tasks["mixed.run"].apply_async((n,), queue=DURABLE).id for n in range(20)]

    wait_until(lambda: len(runs(prefix)) >= 80, timeout=60, message="80 jobs ran")
    wait_until(lambda: kombu_state(prefix, LEGACY) == (0, 0),
               message="legacy lists empty and every delivery acked (unacked hash empty)")
    assert runs(prefix) == {task_id: 1 for task_id in legacy + durable}
    assert {name.split("-")[0] for name in hosts(prefix).values()} == {"w0"}
    # kombu's priority steps: the plus worker drains step 0 (priorities 0-2) first, ...
    steps = [priority[t] // 3 * 3 for t in order(prefix) if t in priority]
    assert steps == sorted(steps), steps
    # ... and keeps the bytes of what is not a kombu message, as a dead letter.
    dead = wait_until(lambda: inspector_for(view).ids_in_state("failed"), message="dead letter")
    assert len(dead) == 1
    assert view.raw_message(dead[0]) == b"\xffnot a kombu message"
    record = inspector_for(view).job(dead[0])
    assert record is not None and record["reason"] == "malformed message", record
    assert record["q"] == f"{LEGACY}.malformed", record
