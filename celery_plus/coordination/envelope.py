"""Task messages as the coordination store keeps them, and putting one back on the broker.

The store keeps each message as a kombu envelope (the layout of kombu's virtual transports and
of the durable transport: ``body`` base64, ``content-type``, ``content-encoding``, ``headers``,
``properties`` with ``delivery_info``), so the admin reads it like any job record and a retry
can publish it again, body byte for byte, to the exchange and routing key it was sent to.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any

#: Message properties kept with the envelope and given back on a republish.
PROPERTIES = ("correlation_id", "reply_to", "priority", "delivery_mode")


def build(payload: bytes, content_type: str, content_encoding: str,
          headers: Mapping[str, Any], properties: Mapping[str, Any], exchange: Any,
          routing_key: str) -> dict[str, Any]:
    """The envelope of one serialized message bound for ``exchange`` / ``routing_key``."""
    props: dict[str, Any] = {k: properties[k] for k in PROPERTIES
                             if properties.get(k) is not None}
    props["body_encoding"] = "base64"
    props["delivery_info"] = {"exchange": getattr(exchange, "name", exchange) or "",
                              "routing_key": routing_key or ""}
    return {"body": base64.b64encode(payload).decode("ascii"),
            "content-encoding": content_encoding, "content-type": content_type,
            "headers": dict(headers), "properties": props}


def from_delivery(message: Any) -> dict[str, Any]:
    """The envelope of a kombu message a worker received (its body as delivered)."""
    body = message.body
    payload = body.encode(message.content_encoding or "utf-8") if isinstance(body, str) else body
    info = message.delivery_info or {}
    return build(bytes(payload), message.content_type, message.content_encoding,
                 message.headers or {}, message.properties or {}, info.get("exchange") or "",
                 info.get("routing_key") or "")


def parse(raw: bytes | str) -> dict[str, Any]:
    """An envelope read back from the store."""
    envelope = json.loads(raw)
    if not isinstance(envelope, dict) or not isinstance(envelope.get("properties"), dict):
        raise ValueError("the stored message is not a kombu envelope")
    return envelope


def publish(app: Any, envelope: Mapping[str, Any], queue: str,
            headers: Mapping[str, Any] | None = None) -> None:
    """Publish ``envelope`` to the app's broker (``headers`` override some of its headers).

    The queue is declared first (as Celery does on a send), so a message routed by the
    default exchange to a queue no worker declared yet is not dropped by the broker.
    """
    declare = [app.amqp.queues[queue]] if queue else []
    with app.producer_or_acquire() as producer:
        publish_with(producer, envelope, queue, headers, declare=declare)


def publish_with(producer: Any, envelope: Mapping[str, Any], queue: str,
                 headers: Mapping[str, Any] | None = None, *,
                 exchange: str | None = None, routing_key: str | None = None,
                 declare: Any = (), retry: bool = True) -> None:
    """Publish ``envelope`` through kombu's ``producer``: the body byte for byte, its content
    type, encoding, headers (``headers`` override some) and properties, and kombu writes the
    transport's delivery properties (delivery tag, delivery info) itself. The exchange and
    routing key are the envelope's unless given (``exchange=""``: kombu's anonymous exchange,
    the routing key names the queue)."""
    props = dict(envelope["properties"])
    info = props.pop("delivery_info", None) or {}
    props.pop("body_encoding", None)
    props.pop("delivery_tag", None)  # the broker's own, given by kombu on this publish
    body = base64.b64decode(envelope["body"])
    producer.publish(
        body, exchange=(info.get("exchange") or "") if exchange is None else exchange,
        routing_key=(info.get("routing_key") or queue) if routing_key is None else routing_key,
        headers={**(envelope.get("headers") or {}), **(headers or {})},
        content_type=envelope.get("content-type"),
        content_encoding=envelope.get("content-encoding") or "binary",
        declare=list(declare), retry=retry, **props)
