"""``task_published``: the store's answer to each publish, sent while the publish is under way
(inside Celery's ``before_task_publish`` / ``after_task_publish``), on an in-process store."""

from __future__ import annotations

import uuid
from typing import Any

from celery import signals as celery_signals

from celery_plus import Celery, signals


def test_each_publish_is_answered_inside_celerys_publish_signals() -> None:
    app = Celery("sig", broker=f"plus+memory://{uuid.uuid4().hex}", set_as_current=False)

    @app.task(name="sig.unique", unique=True)
    def unique(key: str) -> str:
        return key

    order: list[Any] = []

    def before(sender: Any = None, **_: Any) -> None:
        order.append("before")

    def published(sender: Any = None, task_id: Any = None, deduplicated: Any = None,
                  holder_id: Any = None, **_: Any) -> None:
        order.append((sender, task_id, deduplicated, holder_id))

    def after(sender: Any = None, **_: Any) -> None:
        order.append("after")

    celery_signals.before_task_publish.connect(before, weak=False)
    signals.task_published.connect(published, weak=False)
    celery_signals.after_task_publish.connect(after, weak=False)
    try:
        first = unique.apply_async(("k",), countdown=60)
        second = unique.apply_async(("k",), countdown=60)
    finally:
        celery_signals.before_task_publish.disconnect(before)
        signals.task_published.disconnect(published)
        celery_signals.after_task_publish.disconnect(after)
        app.close()
    assert second.id == first.id and second.deduplicated is True
    duplicate_id = order[4][1]  # the id the duplicate would have had
    assert duplicate_id != first.id
    assert order == ["before", ("sig.unique", first.id, False, None), "after",
                     "before", ("sig.unique", duplicate_id, True, first.id), "after"], order
