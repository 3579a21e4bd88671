"""plus_durable_queues and plus_legacy_url: validation that names the setting and the fix."""

from __future__ import annotations

import pytest
from celery.exceptions import ImproperlyConfigured

from celery_plus import settings


def test_without_the_settings_every_queue_is_durable() -> None:
    config = settings.resolve({})
    assert config.durable_queues is None and config.legacy_url is None


def test_the_durable_queues_resolve_to_a_set() -> None:
    config = settings.resolve({"plus_durable_queues": ["a", "b", "a"],
                               "plus_legacy_url": "redis://h:6379/1"})
    assert config.durable_queues == frozenset({"a", "b"})
    assert config.legacy_url == "redis://h:6379/1"


@pytest.mark.parametrize("value", ["celery", ["celery", ""], ["celery.pidbox"], [1],
                                   ["celeryev.x"]])
def test_bad_durable_queues_fail_naming_the_setting(value: object) -> None:
    with pytest.raises(ImproperlyConfigured, match="plus_durable_queues") as err:
        settings.resolve({"plus_durable_queues": value})
    assert "list of task queue names" in str(err.value)


def test_the_legacy_url_must_be_redis() -> None:
    with pytest.raises(ImproperlyConfigured, match=r"plus_legacy_url.*redis://"):
        settings.resolve({"plus_durable_queues": [], "plus_legacy_url": "amqp://x"})


def test_a_legacy_url_without_durable_queues_is_refused() -> None:
    with pytest.raises(ImproperlyConfigured, match="plus_durable_queues is None"):
        settings.resolve({"plus_legacy_url": "redis://localhost:6379/0"})
