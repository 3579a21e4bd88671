"""Defect 2 of issue 12: publishing while the Redis store is down (and a PostgreSQL store).

The lean publish path falls back to kombu's ``Producer.publish`` on a connection error; that
fallback must apply the task's retry policy and end, as plain Celery does, in kombu's
``OperationalError`` — not in a ``TypeError`` from arguments passed twice.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kombu.exceptions import OperationalError

from celery_plus import Celery
from tests.redis_servers import free_port, redis_server, wait_closed


@pytest.mark.parametrize("scheme", ["plus+redis", "redis"])
def test_a_publish_while_redis_is_down_retries_then_raises_operational_error(
        tmp_path: Path, scheme: str) -> None:
    with redis_server(tmp_path / "redis") as server:
        url = f"{scheme}://127.0.0.1:{server.port}/0"
        app = Celery("down", broker=url, set_as_current=False)
        app.conf.broker_connection_timeout = 1

        @app.task(name="down.add")
        def add(x: int, y: int) -> int:
            return x + y

        add.delay(1, 2)  # connected: the publish works
        server.stop()
        wait_closed(server.port)
        retries: list[float] = []
        policy = {"max_retries": 2, "interval_start": 0, "interval_step": 0.05,
                  "interval_max": 0.1, "errback": lambda exc, interval: retries.append(interval)}
        with pytest.raises(OperationalError):
            add.apply_async((1, 2), retry=True, retry_policy=policy)
        assert retries, "kombu's retry policy was not applied"
        app.close()


@pytest.mark.parametrize("url", ["redis://127.0.0.1:{port}/0",
                                 "plus+redis://127.0.0.1:{port}/0",
                                 "plus+postgresql://root@127.0.0.1:{port}/test"])
def test_a_publish_to_a_store_never_reached_raises_operational_error(url: str) -> None:
    """Down from the start: the connection's own retries, then ``OperationalError``, on every
    store as on plain ``redis://`` (the task's retry policy applies to a publish that fails
    once connected, above)."""
    app = Celery("down", broker=url.format(port=free_port()), set_as_current=False)
    app.conf.broker_connection_timeout = 1

    @app.task(name="down.add")
    def add(x: int, y: int) -> int:
        return x + y

    with pytest.raises(OperationalError):
        add.apply_async((1, 2), retry=True, retry_policy={"max_retries": 1})
    app.close()
