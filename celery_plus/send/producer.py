"""The lean publish path for durable queues.

Celery publishes a task as ``Producer.publish`` → entity declaration → ``Connection.ensure``
→ ``basic_publish`` → exchange routing → ``_put``. For a direct publish to a durable
``plus`` queue none of the middle steps does anything useful (the store needs no declared
entities and routing is the queue name), so :class:`Producer` goes straight to the channel.
Anything else — other exchanges, transient or legacy queues (``plus_durable_queues``), other
transports, or a connection error (which then gets kombu's retry policy) — takes kombu's
normal path. A producer whose channel a connection error closed takes its connection's new
channel first.
"""

from __future__ import annotations

from typing import Any

import kombu

from celery_plus.transport.channel import Channel


class Producer(kombu.Producer):
    def publish(self, body: Any, routing_key: str | None = None, delivery_mode: Any = None,
                mandatory: bool = False, immediate: bool = False, priority: int = 0,
                content_type: str | None = None, content_encoding: str | None = None,
                serializer: str | None = None, headers: dict[str, Any] | None = None,
                compression: str | None = None, exchange: Any = None, retry: bool = False,
                retry_policy: dict[str, Any] | None = None, declare: Any = None,
                expiration: float | None = None, timeout: float | None = None,
                confirm_timeout: float | None = None, **properties: Any) -> Any:
        channel = self._live_channel()
        if (exchange == "" and routing_key and isinstance(channel, Channel)
                and channel.is_durable(routing_key)):
            headers = {} if headers is None else headers
            # A copy: on a connection error the same arguments go to kombu's path below.
            direct = dict(properties)
            _, direct["delivery_mode"] = self._delivery_details(self.exchange, delivery_mode)
            if expiration is not None:
                direct["expiration"] = str(int(expiration * 1000))
            payload, ctype, cencoding = self._prepare(
                body, serializer, content_type, content_encoding,
                self.compression if compression is None else compression, headers)
            message = channel.prepare_message(
                payload, priority, ctype, cencoding, headers, direct)
            try:
                channel.publish_direct(routing_key, message)
                return None
            except self.connection.connection_errors:
                pass  # fall back to kombu's path, which applies the retry policy
        return super().publish(
            body, routing_key=routing_key, delivery_mode=delivery_mode, mandatory=mandatory,
            immediate=immediate, priority=priority, content_type=content_type,
            content_encoding=content_encoding, serializer=serializer, headers=headers,
            compression=compression, exchange=exchange, retry=retry,
            retry_policy=retry_policy, declare=declare, expiration=expiration,
            timeout=timeout, confirm_timeout=confirm_timeout, **properties)

    def _live_channel(self) -> Any:
        """The producer's channel; a new one of its connection if a connection error closed
        the old one (kombu's retries revive the entity they retry, not this producer)."""
        channel = self.channel
        connection = self.connection
        if isinstance(channel, Channel) and channel.connection is None and \
                isinstance(connection, kombu.Connection):
            self.revive(connection)  # its channel becomes the connection's current one
            channel = self.channel
        return channel

