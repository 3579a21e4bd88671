"""``send_task`` by name applies the task's extensions before anything finalized the app.

A client that declares its tasks and publishes by name (``app.send_task("name", ...)``) as
its first act used to publish without the concurrency and uniqueness header: the tasks of
an app are registered when it finalizes, and ``send_task`` looked them up without
finalizing. Found by the fault suite (its publisher publishes by name).
"""

from __future__ import annotations

from pathlib import Path

from celery_plus import Celery
from celery_plus.stores.sqlite.backend import SQLiteBackend
from tests.inspectors import inspector_for


def test_send_task_by_name_on_a_fresh_app_carries_the_extensions(tmp_path: Path) -> None:
    app = Celery("byname", broker=f"plus+sqlite:///{tmp_path}/broker.db", set_as_current=False)

    @app.task(name="byname.limited", concurrency=1, concurrency_key="key")
    def limited(key: str) -> str:
        return key

    @app.task(name="byname.unique", unique=True)
    def unique(key: str) -> str:
        return key

    assert not app.finalized
    first = app.send_task("byname.limited", ("a",))
    held = app.send_task("byname.unique", ("k",))
    duplicate = app.send_task("byname.unique", ("k",))
    store = SQLiteBackend(f"sqlite:///{tmp_path}/broker.db")
    try:
        record = inspector_for(store).job(first.id) or {}
        assert record.get("cg") == 'byname.limited:"a"', record
        assert record.get("cl") == "1", record
        assert duplicate.deduplicated and duplicate.id == held.id
    finally:
        store.close()
        app.close()
