"""Defect 7 of issue 12: a misspelt ``plus_*`` setting fails at start-up, naming the spelling
the user wrote and the closest valid one, in the user's own style."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from celery.exceptions import ImproperlyConfigured

from celery_plus import Celery, settings


@pytest.mark.parametrize(("written", "suggested"), [
    ("plus_visiblity_timeout", "plus_visibility_timeout"),
    ("PLUS_MAX_DELIVERYS", "PLUS_MAX_DELIVERIES"),
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
