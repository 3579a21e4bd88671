"""Mixed deployment in one app: the queues in ``plus_durable_queues`` go to the durable store,
every other task queue to kombu's native Redis layout (on the ``plus+redis://`` server or on
``plus_legacy_url`` for the SQL stores), where kombu's own semantics serve it.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import kombu
import pytest
import redis
from celery.exceptions import ImproperlyConfigured

from celery_plus import Celery
from celery_plus.queue_migration.layout import KombuLayout
from celery_plus.transport.channel import Channel
from tests.inspectors import inspector_for

REDIS_URL = "redis://127.0.0.1:6379/0"


@pytest.fixture
def prefix() -> Iterator[str]:
    name = f"mix{uuid.uuid4().hex[:8]}"
    yield name
    client = redis.Redis.from_url(REDIS_URL)
    for key in client.scan_iter(f"{name}:*"):
        client.delete(key)
    client.close()


def make_app(prefix: str, broker: str, **conf: Any) -> Celery:
    app = Celery("mix", broker=broker, set_as_current=False)
    app.conf.update(plus_key_prefix=prefix, task_ignore_result=True,
                    broker_transport_options={"global_keyprefix": f"{prefix}:k:"}, **conf)

    @app.task(name="mix.t")
    def t(n: int) -> int:
        return n

    return app


@pytest.fixture(params=["redis", "sqlite"])
def mixed(request: pytest.FixtureRequest, prefix: str, tmp_path: Path) -> Iterator[Celery]:
    """A mixed app whose store is Redis (legacy on the same server) or SQLite (legacy on
    ``plus_legacy_url``); ``d`` is its only durable queue."""
    if request.param == "redis":
        app = make_app(prefix, f"plus+{REDIS_URL}", plus_durable_queues=["d"])
    else:
        app = make_app(prefix, f"plus+sqlite:///{tmp_path / 'store.db'}",
                       plus_durable_queues=["d"], plus_legacy_url=REDIS_URL)
    yield app
    app.close()


def kombu_lists(prefix: str, queue: str) -> list[int]:
    client = redis.Redis.from_url(REDIS_URL)
    layout = KombuLayout(global_keyprefix=f"{prefix}:k:")
    sizes = [int(client.llen(key)) for key in layout.priority_lists(queue)]
    client.close()
    return sizes


def test_listed_queues_are_durable_the_others_stay_in_kombus_layout(
        mixed: Celery, prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    direct: list[str] = []
    original = Channel.publish_direct
    monkeypatch.setattr(Channel, "publish_direct",
                        lambda self, queue, message: (direct.append(queue),
                                                      original(self, queue, message)))
    durable = mixed.tasks["mix.t"].apply_async((1,), queue="d")
    mixed.tasks["mix.t"].apply_async((2,), queue="l")
    mixed.tasks["mix.t"].apply_async((3,), queue="l", priority=7)
    assert direct == ["d"], "the lean path only for durable queues"
    assert kombu_lists(prefix, "l") == [1, 0, 1, 0]  # priority steps 0, 3, 6, 9
    assert kombu_lists(prefix, "d") == [0, 0, 0, 0]
    with mixed.connection_for_write() as conn:
        channel = conn.default_channel
        assert inspector_for(channel.backend).job(durable.id) is not None
        assert channel._size("d") == 1 and channel._size("l") == 2
        assert channel.queue_purge("l") == 2
    assert kombu_lists(prefix, "l") == [0, 0, 0, 0]


def test_without_the_setting_every_task_queue_is_durable(prefix: str) -> None:
    app = make_app(prefix, f"plus+{REDIS_URL}")
    result = app.tasks["mix.t"].apply_async((1,), queue="l")
    with app.connection_for_write() as conn:
        assert inspector_for(conn.default_channel.backend).job(result.id) is not None
    assert kombu_lists(prefix, "l") == [0, 0, 0, 0]
    app.close()


def test_a_consumer_takes_legacy_messages_with_kombus_ack_semantics(
        mixed: Celery, prefix: str) -> None:
    # Published by a plain kombu producer, as plain Celery would.
    plain = kombu.Connection(REDIS_URL, transport_options={"global_keyprefix": f"{prefix}:k:"})
    plain.Producer().publish({"n": 1}, routing_key="l", headers={"id": "x1", "task": "mix.t"})
    plain.release()
    unacked = KombuLayout(global_keyprefix=f"{prefix}:k:").unacked
    client = redis.Redis.from_url(REDIS_URL)
    got: list[Any] = []
    queue = kombu.Queue("l", routing_key="l")
    with mixed.connection_for_read() as conn, conn.Consumer(queue, callbacks=[
            lambda body, message: got.append((body, message))]):
        conn.drain_events(timeout=5)
        body, message = got[0]
        assert body == {"n": 1}
        assert client.hlen(unacked) == 1, "held: in kombu's unacked hash"
        message.reject(requeue=True)
        assert client.hlen(unacked) == 0 and kombu_lists(prefix, "l")[0] == 1
        conn.drain_events(timeout=5)
        assert len(got) == 2
        got[1][1].ack()
        assert client.hlen(unacked) == 0 and kombu_lists(prefix, "l")[0] == 0
    client.close()


def test_a_sql_store_without_a_legacy_url_fails_naming_the_settings(
        prefix: str, tmp_path: Path) -> None:
    app = make_app(prefix, f"plus+sqlite:///{tmp_path / 'store.db'}", plus_durable_queues=[])
    with pytest.raises(ImproperlyConfigured, match=r"plus_durable_queues.*plus_legacy_url"):
        app.connection_for_write().transport  # noqa: B018  (creating it is the check)
    app.close()


def test_held_legacy_messages_go_back_to_their_list_when_the_consumer_closes(
        mixed: Celery, prefix: str) -> None:
    for n in range(3):
        mixed.tasks["mix.t"].apply_async((n,), queue="l")
    unacked = KombuLayout(global_keyprefix=f"{prefix}:k:").unacked
    client = redis.Redis.from_url(REDIS_URL)
    got: list[Any] = []
    with mixed.connection_for_read() as conn, conn.Consumer(
            kombu.Queue("l", routing_key="l"), prefetch_count=3,
            callbacks=[lambda body, message: got.append(message)]):
        while len(got) < 3:
            conn.drain_events(timeout=5)
        assert kombu_lists(prefix, "l")[0] == 0 and client.hlen(unacked) == 3
    # A warm shutdown: the unacked deliveries are restored, as kombu's consumers do.
    assert kombu_lists(prefix, "l")[0] == 3 and client.hlen(unacked) == 0
    client.close()
