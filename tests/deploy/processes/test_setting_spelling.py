"""Defect 7 of issue 12: a misspelt ``plus_*`` setting fails at start-up, naming the spelling
the user wrote and the closest valid one, in the user's own style; so does a setting written in
a form the app never reads (upper-case without ``namespace="CELERY"``, lower-case in Django's
settings)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from celery.exceptions import ImproperlyConfigured

from celery_plus import Celery, settings


@pytest.mark.parametrize(("written", "suggested"), [
    ("plus_visiblity_timeout", "plus_visibility_timeout"),
    ("PLUS_MAX_DELIVERYS", "CELERY_PLUS_MAX_DELIVERIES"),  # PLUS_X is never read
    ("CELERY_PLUS_MAX_DELIVERYS", "CELERY_PLUS_MAX_DELIVERIES"),
])
def test_a_misspelt_setting_names_what_was_written_and_the_closest_name(
        written: str, suggested: str) -> None:
    with pytest.raises(ImproperlyConfigured) as err:
        settings.check_spelling(["broker_url", written], namespace="CELERY")
    assert repr(written) in str(err.value) and repr(suggested) in str(err.value)


def test_keys_of_other_namespaces_and_known_settings_pass() -> None:
    keys = ["plus_visibility_timeout", "CELERY_PLUS_MAX_DELIVERIES", "MYAPP_PLUS_THING",
            "surplus_value", "broker_url"]
    assert settings.unknown_settings(keys, namespace="CELERY") == []


class Lower:
    plus_visiblity_timeout = 10


class Upper:
    CELERY_PLUS_VISIBLITY_TIMEOUT = 10


class UpperRight:
    CELERY_PLUS_VISIBILITY_TIMEOUT = 10


@pytest.mark.parametrize(("load", "written", "says"), [
    (lambda app: app.conf.update(plus_visiblity_timeout=10), "plus_visiblity_timeout",
     "Did you mean 'plus_visibility_timeout'?"),
    (lambda app: setattr(app.conf, "plus_visiblity_timeout", 10), "plus_visiblity_timeout",
     "Did you mean 'plus_visibility_timeout'?"),
    (lambda app: app.config_from_object(Lower), "plus_visiblity_timeout",
     "Did you mean 'plus_visibility_timeout'?"),
    (lambda app: app.config_from_object(Lower, namespace="CELERY"), "plus_visiblity_timeout",
     "Did you mean 'plus_visibility_timeout'?"),
    (lambda app: app.config_from_object(Upper, namespace="CELERY"),
     "CELERY_PLUS_VISIBLITY_TIMEOUT", "Did you mean 'CELERY_PLUS_VISIBILITY_TIMEOUT'?"),
    # Without a namespace Celery reads no upper-case key: misspelt or not, never read.
    (lambda app: app.config_from_object(Upper), "CELERY_PLUS_VISIBLITY_TIMEOUT",
     "Did you mean 'plus_visibility_timeout' (upper-case keys are read only through "
     "config_from_object(..., namespace='CELERY')"),
    (lambda app: app.config_from_object(UpperRight), "CELERY_PLUS_VISIBILITY_TIMEOUT",
     "never reads the setting 'CELERY_PLUS_VISIBILITY_TIMEOUT'. Write 'plus_visibility_timeout'"),
    (lambda app: app.conf.update(CELERY_PLUS_MAX_DELIVERYS=3), "CELERY_PLUS_MAX_DELIVERYS",
     "Did you mean 'plus_max_deliveries' (upper-case"),
    (lambda app: app.conf.update(CELERY_PLUS_MAX_DELIVERIES=3), "CELERY_PLUS_MAX_DELIVERIES",
     "Write 'plus_max_deliveries' (upper-case"),
], ids=["update", "setattr", "object", "object-namespace", "object-namespace-upper",
        "object-upper", "object-upper-right-name", "update-upper", "update-upper-right-name"])
def test_every_spelling_the_app_would_not_read_fails_naming_it_and_the_fix(
        load: Any, written: str, says: str) -> None:
    app = Celery("spelling", broker="plus+sqlite:///:memory:", set_as_current=False)
    load(app)
    with pytest.raises(ImproperlyConfigured) as err:
        app.plus_config()
    assert repr(written) in str(err.value) and says in str(err.value), str(err.value)


def test_the_read_forms_pass() -> None:
    app = Celery("spelling", broker="plus+sqlite:///:memory:", set_as_current=False)
    app.config_from_object(UpperRight, namespace="CELERY")
    app.conf.update(plus_max_deliveries=3)
    config = app.plus_config()
    assert (config.visibility_timeout, config.max_deliveries) == (10, 3)


def test_the_app_refuses_a_misspelt_setting_from_config_from_object() -> None:
    class Config:
        CELERY_BROKER_URL = "plus+redis://127.0.0.1:6379/0"
        CELERY_PLUS_MAX_DELIVERYS = 3

    app = Celery("spelling", set_as_current=False)
    app.config_from_object(Config, namespace="CELERY")
    with pytest.raises(ImproperlyConfigured, match="CELERY_PLUS_MAX_DELIVERIES"):
        app.plus_config()
    with pytest.raises(ImproperlyConfigured, match="CELERY_PLUS_MAX_DELIVERYS"):
        app.connection_for_write().connect()


def test_a_worker_with_a_misspelt_setting_does_not_start(tmp_path: Path) -> None:
    (tmp_path / "spelt.py").write_text(
        "from celery_plus import Celery\n"
        f"app = Celery('spelt', broker='plus+sqlite:///{tmp_path}/b.db')\n"
        "app.conf.plus_visiblity_timeout = 10\n")
    proc = subprocess.run([sys.executable, "-m", "celery_plus.cli", "worker", "-A", "spelt",
                           "--pool=solo"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "'plus_visiblity_timeout'" in out and "'plus_visibility_timeout'" in out, out


@pytest.mark.parametrize(("line", "written"), [
    ("CELERY_PLUS_VISIBLITY_TIMEOUT = 10", "'CELERY_PLUS_VISIBLITY_TIMEOUT'"),
    ("plus_visiblity_timeout = 10", "'plus_visiblity_timeout'"),  # Django drops lower-case
], ids=["upper", "lower"])
def test_a_django_worker_with_a_misspelt_setting_does_not_start(
        tmp_path: Path, line: str, written: str) -> None:
    (tmp_path / "djsettings.py").write_text(
        f"SECRET_KEY = 'k'\nINSTALLED_APPS = []\n"
        f"CELERY_BROKER_URL = 'plus+sqlite:///{tmp_path}/b.db'\n{line}\n")
    (tmp_path / "djproj.py").write_text(
        "import os\n"
        "os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'djsettings')\n"
        "from celery_plus import Celery\n"
        "app = Celery('djproj')\n"
        "app.config_from_object('django.conf:settings', namespace='CELERY')\n")
    proc = subprocess.run([sys.executable, "-m", "celery_plus.cli", "worker", "-A", "djproj",
                           "--pool=solo"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert written in out and "'CELERY_PLUS_VISIBILITY_TIMEOUT'" in out, out
