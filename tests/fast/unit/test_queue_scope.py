"""On a Redis Cluster store, a task with unique / concurrency / cluster rate-limit options
publishes only to its home queue: another queue is an error naming the task, the option and
the fix, before anything is sent (docs/redis-cluster.md)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from celery_plus import Celery
from celery_plus.send.queue_scope import QueueScopeError, check_queue_scope, home_queue

CLUSTER = "plus+redis+cluster://127.0.0.1:1/0"


@pytest.fixture
def app() -> Iterator[Celery]:
    # Nothing is published: the check comes first, and the broker cannot be reached.
    app = Celery("scope", broker=CLUSTER, set_as_current=False)
    app.conf.task_routes = {"scope.routed": {"queue": "reports"}}
    yield app
    app.close()


@pytest.mark.parametrize(("options", "option_text"), [
    ({"unique": True}, "unique"),
    ({"concurrency": 2}, "concurrency"),
    ({"rate_limit": "10/m", "rate_limit_scope": "cluster"}, "rate_limit_scope='cluster'"),
])
def test_a_guarded_task_sent_to_another_queue_fails_naming_task_option_and_fix(
        app: Celery, options: dict[str, Any], option_text: str) -> None:
    @app.task(name="scope.job", **options)
    def job(n: int) -> None: ...

    with pytest.raises(QueueScopeError) as err:
        job.apply_async((1,), queue="other")
    text = str(err.value)
    assert "'scope.job'" in text and option_text in text and "'other'" in text
    assert "home queue 'celery'" in text and "Route the task to one queue" in text


def test_the_home_queue_follows_the_task_and_the_routes(app: Celery) -> None:
    @app.task(name="scope.own", queue="mine", unique=True)
    def own() -> None: ...

    @app.task(name="scope.routed", concurrency=1)
    def routed() -> None: ...

    assert home_queue(app, own.name, own) == "mine"
    assert home_queue(app, routed.name, routed) == "reports"
    with pytest.raises(QueueScopeError, match="home queue 'reports'"):
        routed.apply_async(queue="celery")


def test_a_router_of_the_arguments_gives_no_fixed_home(app: Celery) -> None:
    def by_region(name: str, args: Any, kwargs: Any, options: Any, task: Any = None,
                  **kw: Any) -> dict[str, str]:
        return {"queue": f"region-{args[0]}"}

    app.conf.task_routes = (by_region,)

    @app.task(name="scope.regional", unique=True)
    def regional(region: str) -> None: ...

    with pytest.raises(QueueScopeError, match="no fixed home queue"):
        regional.delay("eu")


def test_the_home_queue_and_unguarded_tasks_pass(app: Celery) -> None:
    @app.task(name="scope.job", unique=True)
    def job(n: int) -> None: ...

    check_queue_scope(app, job.name, job, {"u": ["scope.job:k", "pending", 0]},
                      {"queue": "celery"}, (1,), {})
    check_queue_scope(app, job.name, job, {"md": 3}, {"queue": "other"}, (1,), {})
    app.conf.broker_url = "plus+redis://127.0.0.1:1/0"  # one server: no queue scope
    check_queue_scope(app, job.name, job, {"u": ["scope.job:k", "pending", 0]},
                      {"queue": "other"}, (1,), {})
