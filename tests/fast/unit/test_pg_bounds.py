"""Issue #27 (unit level): the PostgreSQL store's connections are bounded in time, by
settings a misspelling of which is caught."""

from __future__ import annotations

import logging
import re

import pytest
from celery.exceptions import ImproperlyConfigured

from celery_plus import settings
from celery_plus.stores.postgres import bounds
from celery_plus.stores.postgres.backend import PostgresBackend
from celery_plus.stores.postgres.bounds import LinkBounds, connection_class

URL = "postgresql://u@db.example:5432/app"


def test_the_default_bounds_fail_a_dead_link_within_15_seconds() -> None:
    params = LinkBounds().libpq_params(URL)
    assert params == {"connect_timeout": 5, "keepalives": 1, "keepalives_idle": 5,
                      "keepalives_interval": 1, "keepalives_count": 10,
                      "tcp_user_timeout": 15000}
    idle, interval, count = (params["keepalives_idle"], params["keepalives_interval"],
                             params["keepalives_count"])
    assert idle + interval * count <= 15


def test_libpq_parameters_in_the_url_win() -> None:
    params = LinkBounds().libpq_params(URL + "?keepalives_idle=60&connect_timeout=20")
    assert "keepalives_idle" not in params and "connect_timeout" not in params
    assert params["tcp_user_timeout"] == 15000


def test_the_settings_reach_the_backend() -> None:
    config = settings.resolve({"plus_pg_connect_timeout": 2, "plus_pg_dead_link_timeout": 30,
                               "plus_pg_reply_timeout": None})
    backend = PostgresBackend.from_url(URL, config)
    assert backend.bounds == LinkBounds(2.0, 30.0, None)
    assert backend.bounds.libpq_params(URL)["tcp_user_timeout"] == 30000


@pytest.mark.parametrize("values", [{"plus_pg_reply_timout": 5},
                                    {"plus_pg_dead_link_timeout": 1},
                                    {"plus_pg_connect_timeout": 0}])
def test_a_misspelt_or_invalid_bound_is_refused(values: dict[str, object]) -> None:
    with pytest.raises(ImproperlyConfigured, match="plus_pg_"):
        settings.resolve(values)


def test_one_connection_class_per_reply_timeout() -> None:
    assert connection_class(3.0) is connection_class(3.0)
    assert connection_class(3.0) is not connection_class(None)


def test_a_psycopg_that_cannot_bound_a_wait_gets_plain_connections_and_a_warning(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    import psycopg

    assert bounds.reply_bound_supported()  # the psycopg the tests run on bounds replies
    monkeypatch.setattr(bounds, "reply_bound_supported", lambda: False)
    # Another test in this process may have set up Celery's logging (levels, propagation).
    monkeypatch.setattr(bounds.logger, "propagate", True)
    with caplog.at_level(logging.WARNING, logger=bounds.logger.name):
        assert bounds._bounded_class(7.0) is psycopg.Connection
    assert "plus_pg_reply_timeout is not applied" in caplog.text


def test_the_bounds_are_settable_through_broker_transport_options() -> None:
    """As every plus_* setting of a plain celery.Celery app (docs/configuration.md); a
    misspelt name is refused with the right one."""
    import celery

    import celery_plus  # noqa: F401  (registers the plus transport)

    app = celery.Celery("bounds", broker="plus+postgresql://u@127.0.0.1:1/app",
                        set_as_current=False)
    app.conf.broker_transport_options = {"plus_pg_reply_timeout": 4.0,
                                         "plus_pg_connect_timeout": 3}
    with app.connection_for_write() as conn:
        assert conn.transport.backend.bounds == LinkBounds(3.0, 15.0, 4.0)
    app.conf.broker_transport_options = {"plus_pg_reply_timout": 4.0}
    with pytest.raises(ImproperlyConfigured, match="Did you mean 'plus_pg_reply_timeout'"), \
            app.connection_for_write() as conn:
        conn.transport  # noqa: B018


def test_the_reply_bound_is_off_by_default_and_must_be_under_half_the_lease() -> None:
    """A statement whose reply was lost may have committed, and its call is tried again:
    the bound is opt-in, and one the lease keeper can wait twice within a lease."""
    assert settings.resolve({}).pg_reply_timeout is None
    assert settings.resolve({"plus_pg_reply_timeout": 7.5}).pg_reply_timeout == 7.5
    with pytest.raises(ImproperlyConfigured, match=re.escape(
            "plus_pg_reply_timeout=15.0 must be less than half of plus_visibility_timeout=30.0")):
        settings.resolve({"plus_pg_reply_timeout": 15.0})
