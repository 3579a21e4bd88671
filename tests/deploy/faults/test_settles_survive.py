"""Settles survive store errors (issue 11, defect 4): an ack whose store call fails is kept
and stored once the store answers again, so its job is not recovered and run again.

A consumer (kombu, on the ``plus`` transport) takes jobs, the store is broken, the
consumer acks them: the store call fails and the acks stay pending; the store comes back:
the acks land, every job is completed once, no lease was recovered. PostgreSQL's case of a
server that ended the pool's sessions (a restart, ``pg_terminate_backend``, an idle
timeout) needs no waiting at all: the store call is retried on a fresh connection.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import kombu

from tests.inspectors import inspector_for
from tests.support import wait_until

from .harness import Deployment
from .servers import SmallDisk


def consume(deployment: Deployment, n: int) -> tuple[kombu.Connection, list[kombu.Message]]:
    ids = [deployment.publish("fault.work", f"w{i}", 0.0) for i in range(n)]
    conn = kombu.Connection(deployment.broker, transport_options={
        "plus_key_prefix": deployment.prefix, "plus_pg_schema": deployment.prefix,
        "plus_visibility_timeout": deployment.vt, "plus_maintenance_interval": 0.1})
    channel = conn.default_channel
    messages = [channel.basic_get("faults") for _ in ids]
    assert all(m is not None for m in messages)
    return conn, messages


def settle_through_outage(deployment: Deployment, break_store: Callable[[], None],
                          mend_store: Callable[[], None]) -> None:
    conn, messages = consume(deployment, 3)
    ids = list(deployment.jobs.values())
    channel = conn.default_channel
    try:
        break_store()
        for message in messages:
            message.ack()
        with contextlib.suppress(*conn.connection_errors):
            channel.flush_settles()  # fails: kept for the next try
        mend_store()
        wait_until(lambda: all(_state(deployment, i) == "completed" for i in ids),
                   timeout=deployment.vt + 20, message="every ack stored")
        for job_id in ids:
            record = inspector_for(deployment.view).job(job_id) or {}
            assert record.get("dl") == "1", record  # delivered once, never taken over
        assert deployment.view.stats().get("recovered", 0) == 0
    finally:
        conn.close()


def _state(deployment: Deployment, job_id: str) -> str | None:
    """The job's state as the test's own view reads it (None while the view cannot read:
    the observer's connections are not under test)."""
    try:
        return (inspector_for(deployment.view).job(job_id) or {}).get("st")
    except Exception:
        return None


def test_acks_survive_a_redis_outage(deploy: Callable[..., Deployment]) -> None:
    deployment = deploy("settles", "redis", vt=3.0)
    server = deployment.server  # type: ignore[attr-defined]
    settle_through_outage(deployment, server.crash, server.start)


def test_acks_survive_a_postgresql_outage(deploy: Callable[..., Deployment]) -> None:
    deployment = deploy("settles", "postgres", vt=3.0)
    cluster = deployment.server  # type: ignore[attr-defined]
    settle_through_outage(deployment, cluster.stop, cluster.start)


def test_an_ack_on_sessions_the_server_ended_lands_at_once(
        deploy: Callable[..., Deployment]) -> None:
    deployment = deploy("settles", "postgres", vt=30.0)
    cluster = deployment.server  # type: ignore[attr-defined]
    conn, messages = consume(deployment, 3)
    try:
        assert cluster.terminate_sessions() >= 1
        for message in messages:
            message.ack()
        conn.default_channel.flush_settles()  # no error: retried on a fresh session
        for job_id in deployment.jobs.values():
            assert (inspector_for(deployment.view).job(job_id) or {}).get("st") == "completed"
    finally:
        conn.close()


def test_acks_survive_a_full_disk_on_sqlite(deploy: Callable[..., Deployment],
                                            small_disk: SmallDisk) -> None:
    deployment = deploy("settles", "sqlite", vt=3.0,
                        sqlite_path=small_disk.folder / "store.db")
    settle_through_outage(deployment, small_disk.fill, small_disk.free)
