"""``celery_plus.contrib.flower`` without a server: queue rows read from an in-process store
(``plus+memory://``), and Flower's own broker kept for an app that is not on a plus store."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace

import pytest
from celery import Celery as PlainCelery
from flower.views import BaseHandler

from celery_plus import Celery
from celery_plus.contrib import flower as plus_flower


def test_queue_rows_count_ready_scheduled_and_other_queues_apart() -> None:
    app = Celery("fl", broker=f"plus+memory://{uuid.uuid4().hex}", set_as_current=False)
    try:
        for n in range(2):
            app.send_task("t.add", (n,))
        app.send_task("t.add", (9,), countdown=600)
        app.send_task("t.add", (7,), queue="mail")
        rows = asyncio.run(plus_flower.PlusBroker(app).queues(["celery", "mail", "idle"]))
    finally:
        app.close()
    assert rows == [
        {"name": "celery", "messages": 3, "messages_ready": 2, "messages_unacknowledged": 0},
        {"name": "mail", "messages": 1, "messages_ready": 1, "messages_unacknowledged": 0},
        {"name": "idle", "messages": 0, "messages_ready": 0, "messages_unacknowledged": 0}]


def test_install_answers_for_plus_apps_and_keeps_flowers_broker_for_others(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def flowers_own(handler: object) -> str:
        return "flower's broker"

    monkeypatch.setattr(BaseHandler, "get_broker", flowers_own)
    plus_flower.install()
    plus_flower.install()  # idempotent: wraps Flower's method, not its own wrapper
    plain = PlainCelery("plain", broker="redis://127.0.0.1:6379/0", set_as_current=False)
    plus = Celery("plus", broker=f"plus+memory://{uuid.uuid4().hex}", set_as_current=False)
    try:
        assert BaseHandler.get_broker(SimpleNamespace(capp=plain)) == "flower's broker"
        broker = BaseHandler.get_broker(SimpleNamespace(capp=plus))
        assert isinstance(broker, plus_flower.PlusBroker) and broker.app is plus
    finally:
        plain.close()
        plus.close()
