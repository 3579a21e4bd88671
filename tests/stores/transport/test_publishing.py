"""Publishing through a producer whose channel kombu closed after a connection error (issue 11).

After a connection error kombu's ``ensure`` closes every channel of the connection
(``collect``) before it reconnects; when the retries run out, the error reaches the caller and
Celery's producer pool keeps that producer, closed channel and all. The next ``delay()`` must
publish (kombu revives the producer on a new channel), never fail with an ``AttributeError``
from a channel whose ``connection`` kombu set to None.
"""

from __future__ import annotations

import kombu
import pytest

from celery_plus.transport.channel import ChannelClosed
from tests.inspectors import inspector_for

from .conftest import Store


def test_a_pooled_producer_on_a_closed_channel_publishes_on_a_new_one(store: Store) -> None:
    with store.app.producer_or_acquire() as producer:
        closed = producer.channel
        closed.close()  # what kombu's collect() does to it after a connection error
    [job_id] = store.publish(1)
    with store.app.producer_or_acquire() as producer:
        assert producer.channel is not closed  # revived: the pool kept the same producer
    assert (inspector_for(store.view).job(job_id) or {}).get("st") == "enqueued"


def test_a_producer_on_a_closed_channel_publishes_to_a_topic_exchange(store: Store) -> None:
    """A named exchange reads kombu's broker state (``Channel.state``) before ``_put``."""
    exchange = kombu.Exchange("events", type="topic")
    queue = kombu.Queue("events.a", exchange, routing_key="a.#")
    with store.connection() as conn:
        producer = conn.Producer()
        producer.publish({"n": 0}, exchange=exchange, routing_key="a.x", declare=[queue])
        producer.channel.close()
        producer.publish({"n": 1}, exchange=exchange, routing_key="a.x", declare=[queue],
                         retry=True)
    assert store.view.size("events.a") == 2


def test_a_closed_channel_revives_for_an_exchange_it_does_not_declare(store: Store) -> None:
    """Without ``declare`` the publish reads kombu's broker state first; it reconnects too.
    (Routed as kombu routes an exchange it was not told the type of: this test checks the
    revival, not the routing.)"""
    with store.connection() as conn:
        producer = conn.Producer()
        closed = producer.channel
        closed.close()
        producer.publish({"n": 1}, exchange="events", routing_key="a.x", retry=True)
        assert producer.channel is not closed and not producer.channel.closed


def test_a_closed_channel_raises_a_recoverable_connection_error(store: Store) -> None:
    with store.connection() as conn:
        producer = conn.Producer()
        producer.channel.close()
        with pytest.raises(ChannelClosed):
            producer.publish({"n": 1}, routing_key="work")
        assert isinstance(ChannelClosed(), conn.recoverable_connection_errors)
        assert isinstance(ChannelClosed(), kombu.exceptions.ConnectionError)
