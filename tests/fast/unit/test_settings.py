"""plus_* settings: defaults, validation errors that name the setting and the fix."""

from __future__ import annotations

import pytest
from celery.exceptions import ImproperlyConfigured

from celery_plus import settings


def test_defaults_resolve_and_heartbeat_defaults_to_a_third_of_the_lease() -> None:
    config = settings.resolve({})
    assert config.visibility_timeout == 30.0
    assert config.heartbeat_interval == pytest.approx(10.0)
    assert config.max_deliveries == 5
    assert config.key_prefix == "plus"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("plus_visibility_timeout", 0),
        ("plus_visibility_timeout", "30"),
        ("plus_max_deliveries", 0),
        ("plus_max_deliveries", True),
        ("plus_key_prefix", ""),
        ("plus_key_prefix", "a:b"),
        ("plus_completed_max", -1),
    ],
)
def test_bad_value_fails_naming_the_setting_and_its_default(name: str, value: object) -> None:
    with pytest.raises(ImproperlyConfigured) as err:
        settings.resolve({name: value})
    assert name in str(err.value)
    assert "default" in str(err.value)


def test_unknown_plus_setting_is_rejected_with_the_known_names() -> None:
    with pytest.raises(ImproperlyConfigured, match="plus_visibilty_timeout") as err:
        settings.resolve({"plus_visibilty_timeout": 10})
    assert "plus_visibility_timeout" in str(err.value)


def test_heartbeat_must_be_shorter_than_the_lease() -> None:
    with pytest.raises(ImproperlyConfigured, match="plus_heartbeat_interval"):
        settings.resolve({"plus_visibility_timeout": 5, "plus_heartbeat_interval": 5})


def test_other_settings_are_ignored() -> None:
    assert settings.resolve({"broker_url": "x", "task_acks_late": False}).max_deliveries == 5
