"""A ``plus`` transport opens its store with its first channel, not when kombu builds it.

kombu builds a transport for as little as ``Connection(url).as_uri()``; Celery's ``inspect
conf``, ``inspect report`` and ``app.bugreport()`` do that for every URL setting, to mask
passwords. On ``plus+postgresql://`` building the transport used to connect and migrate the
store — the default schema, as such a connection carries no transport options — so those
replies failed when the server had no connection to spare, and created ``celery_plus`` in the
user's database as a side effect.
"""

from __future__ import annotations

import uuid

import kombu
import psycopg
import pytest
from celery import Celery

import celery_plus.transport  # noqa: F401  (registers plus+ URLs)
from tests.fast.conformance.stores import PG_URL
from tests.support import drop_pg_schema


def schema_exists(name: str) -> bool:
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        return conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s",
                            [name]).fetchone() is not None


def test_masking_a_postgres_url_neither_connects_nor_creates_a_schema() -> None:
    schema = f"lazy{uuid.uuid4().hex[:10]}"
    conn = kombu.Connection(f"plus+{PG_URL}", transport_options={"plus_pg_schema": schema})
    try:
        assert conn.as_uri().startswith("plus+postgresql://")
        assert not schema_exists(schema)
    finally:
        conn.release()
        drop_pg_schema(PG_URL, schema)  # if it was created after all


def test_celerys_bugreport_and_conf_do_not_touch_the_store() -> None:
    # Nothing listens on port 1: any attempt to connect would fail.
    app = Celery("lazy", broker="plus+postgresql://nobody@127.0.0.1:1/none",
                 set_as_current=False)
    app.conf.result_backend = "plus+postgresql://nobody@127.0.0.1:1/none"
    report = app.bugreport()  # raised OperationalError before the store opened lazily
    assert "broker_url: 'plus+postgresql://nobody@127.0.0.1:1/none'" in report
    app.close()


def test_the_first_channel_still_fails_at_once_on_a_bad_store() -> None:
    conn = kombu.Connection("plus+postgresql://nobody@127.0.0.1:1/none",
                            connect_timeout=2)
    try:
        with pytest.raises(conn.connection_errors):
            conn.connect()
    finally:
        conn.release()
