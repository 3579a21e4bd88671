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

from .conftest import Store


def test_a_pooled_producer_on_a_closed_channel_publishes_on_a_new_one(store: Store) -> None:
    with store.app.producer_or_acquire() as producer:
        closed = producer.channel
        closed.close()  # what kombu's collect() does to it after a connection error
    [job_id] = store.publish(1)
    with store.app.producer_or_acquire() as producer:
        assert producer.channel is not closed  # revived: the pool kept the same producer
    assert (store.view.job(job_id) or {}).get("st") == "enqueued"


def test_a_closed_channel_raises_a_recoverable_connection_error(store: Store) -> None:
    with store.connection() as conn:
        producer = conn.Producer()
        producer.channel.close()
        with pytest.raises(ChannelClosed):
            producer.publish({"n": 1}, routing_key="work")
        assert isinstance(ChannelClosed(), conn.recoverable_connection_errors)
        assert isinstance(ChannelClosed(), kombu.exceptions.ConnectionError)
