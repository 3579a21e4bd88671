"""The embedded default: a ``celery_plus.Celery`` app with no broker uses a SQLite file.

Acceptance lines covered: with no broker configured the broker is
``plus+sqlite:///<cwd>/.celery-plus/<main>.db`` (``default`` without a name) and, with no
result backend configured, results go to ``plus+sqlite:`` on the same file; every way of
configuring a broker still wins (``broker=``, ``app.conf.broker_url`` before or after the
configuration loads, ``config_from_object`` with or without a namespace, ``CELERY_BROKER_URL``)
and so does a configured result backend; the directory is created when the broker is used,
not when the app is created.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from celery.backends.base import DisabledBackend
from celery.backends.redis import RedisBackend

from celery_plus import Celery
from celery_plus.app import embedded_path, embedded_url
from celery_plus.result_backends.sqlite import SQLiteResultBackend
from celery_plus.stores.sqlite.url import sqlite_path


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    for name in ("CELERY_BROKER_URL", "CELERY_BROKER_READ_URL", "CELERY_BROKER_WRITE_URL",
                 "CELERY_RESULT_BACKEND"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture(autouse=True)
def own_embedded_records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The records of which embedded file each app's workers serve (``runtime/
    embedded_files.py``) are this test's own: workers other tests run on the embedded
    default, elsewhere, are not this test's."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))


def test_no_broker_means_a_sqlite_file_under_the_working_directory(tmp_path: Path) -> None:
    app = Celery("proj", set_as_current=False)
    expected = tmp_path.absolute() / ".celery-plus" / "proj.db"
    assert app.conf.broker_url == f"plus+sqlite:///{expected}"
    assert app.embedded_path == expected
    assert sqlite_path(app.conf.broker_url) == str(expected)
    assert app.uses_embedded_broker()
    conn = app.connection_for_write()
    assert conn.transport_cls == "plus"
    assert conn.hostname == f"sqlite:///{expected}"


def test_the_transport_reads_the_same_file_from_the_url(tmp_path: Path) -> None:
    transport_store = pytest.importorskip("celery_plus.stores.sqlite.backend")
    app = Celery("proj", set_as_current=False)
    inner = app.conf.broker_url.removeprefix("plus+")
    assert transport_store.sqlite_path(inner) == str(app.embedded_path)
    assert sqlite_path(inner) == str(app.embedded_path)


def test_results_default_to_the_same_file(tmp_path: Path) -> None:
    app = Celery("proj", set_as_current=False)
    assert isinstance(app.backend, SQLiteResultBackend)
    assert app.backend.path == str(tmp_path.absolute() / ".celery-plus" / "proj.db")


def test_an_app_without_a_name_uses_default_db(tmp_path: Path) -> None:
    app = Celery(set_as_current=False)
    assert app.conf.broker_url.endswith("/.celery-plus/default.db")


def test_odd_characters_in_the_name_stay_inside_the_folder(tmp_path: Path) -> None:
    path = embedded_path("../evil/name with spaces", tmp_path)
    assert path.parent == tmp_path.absolute() / ".celery-plus"
    expected = f"plus+sqlite:///{tmp_path.absolute()}/.celery-plus/proj.db"
    assert embedded_url("proj", tmp_path) == expected


def test_the_location_is_fixed_when_the_app_is_created(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    app = Celery("proj", set_as_current=False)
    other = tmp_path / "elsewhere"
    other.mkdir()
    monkeypatch.chdir(other)
    assert app.conf.broker_url == f"plus+sqlite:///{tmp_path.absolute()}/.celery-plus/proj.db"


def test_nothing_is_written_until_the_broker_is_used(tmp_path: Path) -> None:
    app = Celery("proj", set_as_current=False)
    assert app.conf.broker_url
    assert app.backend is not None
    assert not (tmp_path / ".celery-plus").exists()
    app.connection_for_write()
    assert (tmp_path / ".celery-plus").is_dir()


# -- every configured broker wins -----------------------------------------------------------
def test_broker_argument_wins() -> None:
    app = Celery("proj", broker="plus+redis://127.0.0.1:6379/0", set_as_current=False)
    assert app.conf.broker_url == "plus+redis://127.0.0.1:6379/0"
    assert not app.uses_embedded_broker()
    # No result backend configured: Celery's behaviour (results disabled) is unchanged.
    assert isinstance(app.backend, DisabledBackend)


def test_conf_before_loading_wins() -> None:
    app = Celery("proj", set_as_current=False)
    app.conf.broker_url = "redis://127.0.0.1:6379/0"
    assert app.conf.broker_url == "redis://127.0.0.1:6379/0"
    assert isinstance(app.backend, DisabledBackend)


def test_conf_after_loading_wins() -> None:
    app = Celery("proj", set_as_current=False)
    assert app.conf.broker_url.startswith("plus+sqlite://")
    app.conf.broker_url = "redis://127.0.0.1:6379/0"
    assert app.conf.broker_url == "redis://127.0.0.1:6379/0"
    assert app.connection_for_write().as_uri().startswith("redis://")
    assert isinstance(app.backend, DisabledBackend)


class Config:
    broker_url = "redis://127.0.0.1:6379/3"


class NamespacedConfig:
    CELERY_BROKER_URL = "redis://127.0.0.1:6379/4"


def test_config_from_object_wins() -> None:
    app = Celery("proj", set_as_current=False)
    app.config_from_object(Config)
    assert app.conf.broker_url == "redis://127.0.0.1:6379/3"
    assert isinstance(app.backend, DisabledBackend)


def test_config_from_object_with_a_namespace_wins() -> None:
    app = Celery("proj", set_as_current=False)
    app.config_from_object(NamespacedConfig, namespace="CELERY")
    assert app.conf.broker_url == "redis://127.0.0.1:6379/4"


def test_environment_variable_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CELERY_BROKER_URL", "redis://127.0.0.1:6379/5")
    app = Celery("proj", set_as_current=False)
    assert app.conf.broker_url == "redis://127.0.0.1:6379/5"
    assert app.connection_for_write().as_uri().startswith("redis://")
    assert isinstance(app.backend, DisabledBackend)


def test_configured_result_backend_wins_on_the_embedded_broker() -> None:
    app = Celery("proj", backend="redis://127.0.0.1:6379/1", set_as_current=False)
    assert app.uses_embedded_broker()
    assert isinstance(app.backend, RedisBackend)


def test_result_backend_from_the_environment_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CELERY_RESULT_BACKEND", "redis://127.0.0.1:6379/2")
    app = Celery("proj", set_as_current=False)
    assert isinstance(app.backend, RedisBackend)


def test_explicit_embedded_url_elsewhere_is_used_as_given(tmp_path: Path) -> None:
    db = tmp_path / "data" / "jobs.db"
    app = Celery("proj", broker=f"plus+sqlite:///{db}", backend=f"plus+sqlite:///{db}",
                 set_as_current=False)
    assert app.conf.broker_url == f"plus+sqlite:///{db}"
    assert not app.uses_embedded_broker()
    assert app.backend.path == str(db)


def test_durable_defaults_are_kept() -> None:
    app = Celery("proj", set_as_current=False)
    assert app.conf.task_acks_late is True
    assert app.conf.plus_visibility_timeout == 30.0


def test_an_implicit_embedded_store_logs_one_warning_per_process_naming_the_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    from celery_plus import app as app_module

    monkeypatch.setattr(app_module, "_embedded_warned", False)
    caplog.set_level(logging.WARNING, logger="celery_plus")
    first = Celery("proj", set_as_current=False)
    first.connection_for_write()
    first.connection_for_read()
    Celery("other", set_as_current=False).connection_for_write()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING
                and "no broker configured" in r.getMessage()]
    assert len(warnings) == 1
    assert str(first.embedded_path) in warnings[0].getMessage()


def test_a_configured_broker_logs_no_embedded_warning(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    from celery_plus import app as app_module

    monkeypatch.setattr(app_module, "_embedded_warned", False)
    caplog.set_level(logging.WARNING, logger="celery_plus")
    Celery("proj", broker="plus+memory://cfg", set_as_current=False).connection_for_write()
    assert not [r for r in caplog.records if "no broker configured" in r.getMessage()]


def test_the_worker_banner_says_embedded_default(caplog: pytest.LogCaptureFixture) -> None:
    from types import SimpleNamespace

    from celery_plus.worker.bootsteps import DurableSetup

    app = Celery("proj", set_as_current=False)
    worker = SimpleNamespace(app=app, pool_cls=None)
    caplog.set_level(logging.INFO, logger="celery_plus.worker")
    DurableSetup(worker).start(worker)
    banner = [r.getMessage() for r in caplog.records if r.name == "celery_plus.worker"]
    assert any("embedded default (no broker configured)" in line
               and str(app.embedded_path) in line for line in banner), banner


def test_the_worker_banners_transport_line_says_embedded_default() -> None:
    from types import SimpleNamespace

    from celery.apps.worker import BANNER

    from celery_plus.worker.bootsteps import DurableSetup

    app = Celery("proj", set_as_current=False)
    uri = app.connection_for_write().as_uri()

    def startup_info(artlines: bool = True) -> str:  # Celery's banner, the fields that matter
        return BANNER.format(app="proj", hostname="w", timestamp="now", version="5",
                             conninfo=uri, results="disabled://", concurrency="1 (solo)",
                             platform="linux", events="OFF", queues="celery")

    worker = SimpleNamespace(app=app, pool_cls=None, startup_info=startup_info)
    DurableSetup(worker)
    [line] = [ln for ln in worker.startup_info().splitlines() if "transport:" in ln]
    assert line.endswith(f"transport:   embedded default (no broker configured): {uri}"), line
    configured = Celery("proj", broker="plus+memory://b", set_as_current=False)
    plain = SimpleNamespace(app=configured, pool_cls=None, startup_info=startup_info)
    DurableSetup(plain)
    assert plain.startup_info is startup_info  # a configured broker: Celery's own banner


def test_a_publisher_on_another_embedded_file_than_its_worker_is_told(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        tmp_path: Path) -> None:
    """Issue #30, point 6: a worker recorded its embedded file for its app; a process of the
    same app choosing the embedded default in another directory is told both files."""
    from celery_plus import app as app_module
    from celery_plus.runtime import embedded_files

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "run"))
    worker_file = tmp_path / "worker" / ".celery-plus" / "shop.db"
    embedded_files.record_worker("shop", worker_file)  # this process stands for the worker
    assert embedded_files.worker_file_elsewhere("shop", worker_file) is None  # itself
    monkeypatch.setattr(embedded_files, "_running", lambda pid: True)
    monkeypatch.setattr(embedded_files.os, "getpid", lambda: 1)  # now: another process
    web = tmp_path / "web"
    web.mkdir()
    monkeypatch.chdir(web)
    monkeypatch.setattr(app_module, "_embedded_warned", False)
    caplog.set_level(logging.WARNING, logger="celery_plus")
    Celery("shop", set_as_current=False).connection_for_write()
    [told] = [r.getMessage() for r in caplog.records if "never reach" in r.getMessage()]
    assert str(worker_file.resolve()) in told and str(web / ".celery-plus" / "shop.db") in told
    monkeypatch.setattr(embedded_files, "_running", lambda pid: False)  # its worker is gone
    assert embedded_files.worker_file_elsewhere("shop", web / "x.db") is None
