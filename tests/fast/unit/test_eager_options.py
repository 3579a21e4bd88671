"""Defect 10 of issue 12, without the pytest plugin: an app in eager mode
(``task_always_eager``, as a project's own tests configure it) applies the extension options as
a worker would. ``tests/stores/app/test_contrib_pytest.py`` covers the same through the fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

from celery_plus import Celery
from celery_plus.exceptions import DuplicateTask


@pytest.fixture
def app(tmp_path: Path) -> Celery:
    app = Celery("eager", broker=f"plus+sqlite:///{tmp_path}/b.db", set_as_current=False)
    app.conf.task_always_eager = True
    return app


def test_a_duplicate_call_in_eager_mode_coalesces_into_the_holder(app: Celery) -> None:
    calls: list[tuple[str, int]] = []

    @app.task(name="eager.ttl", unique_by=["key"], unique_ttl=60)
    def ttl(key: str, n: int) -> int:
        calls.append((key, n))
        return n

    first, again, other = ttl.delay("a", 1), ttl.delay("a", 2), ttl.delay("b", 3)
    assert calls == [("a", 1), ("b", 3)]  # the duplicate did not run
    assert (again.id, again.get(), again.deduplicated) == (first.id, 1, True)
    assert (first.deduplicated, other.deduplicated) == (False, False)


def test_raise_on_duplicate_in_eager_mode(app: Celery) -> None:
    @app.task(name="eager.raises", unique_by=["key"], unique_ttl=60,
              unique_on_duplicate="raise")
    def raises(key: str) -> str:
        return key

    holder = raises.delay("k")
    with pytest.raises(DuplicateTask) as err:
        raises.delay("k")
    assert holder.id in str(err.value)


def test_eager_duplicates_fire_task_deduplicated_and_a_pending_window_never_holds(
        app: Celery) -> None:
    from celery_plus.signals import task_deduplicated

    heard: list[dict[str, object]] = []

    def listener(sender: object = None, **kwargs: object) -> None:
        heard.append({"sender": sender, "holder_id": kwargs.get("holder_id")})

    @app.task(name="eager.ttl2", unique_by=["key"], unique_ttl=60)
    def ttl(key: str) -> str:
        return key

    @app.task(name="eager.pending", unique=True, unique_window="pending")
    def pending(key: str) -> str:
        return key

    task_deduplicated.connect(listener, weak=False)
    try:
        holder = ttl.delay("a")
        ttl.delay("a")
        # A pending window is released when the task starts: in eager mode, at once.
        assert [pending.delay("p").deduplicated for _ in range(2)] == [False, False]
    finally:
        task_deduplicated.disconnect(listener)
    assert heard == [{"sender": "eager.ttl2", "holder_id": holder.id}]
