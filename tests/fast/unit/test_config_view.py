"""``PlusSettings`` reads exactly what Celery's ``Settings`` reads, only faster."""

from __future__ import annotations

import pytest
from celery import Celery as PlainCelery
from celery.app.defaults import _TO_OLD_KEY, DEFAULTS

from celery_plus import Celery
from celery_plus.app import DURABLE_DEFAULTS
from celery_plus.send.config_view import PlusSettings


class Config:
    CELERY_TASK_SERIALIZER = "pickle"
    CELERY_BROKER_POOL_LIMIT = 3
    CELERY_PLUS_VISIBILITY_TIMEOUT = 12.5


def spellings() -> list[str]:
    keys = sorted(DEFAULTS)
    return keys + [_TO_OLD_KEY[k] for k in keys if k in _TO_OLD_KEY] + ["no_such_setting"]


def test_a_celery_plus_app_reads_its_settings_through_plus_settings() -> None:
    app = Celery("t", set_as_current=False)
    app.conf.update(task_default_queue="q")
    conf = app.conf
    assert conf.task_default_queue == "q"
    assert type(conf) is PlusSettings
    assert "__class__" not in conf.changes


@pytest.mark.parametrize("namespace", [None, "CELERY"])
def test_every_key_in_every_spelling_reads_the_same_as_plain_celery(
        namespace: str | None) -> None:
    plain = PlainCelery("t", set_as_current=False, namespace=namespace)
    plus = Celery("t", set_as_current=False, namespace=namespace)
    for app in (plain, plus):
        app.config_from_object(Config)
        app.conf.update(result_expires=77)
    # celery-plus's own defaults differ from Celery's on purpose, in either spelling.
    ours = {*DURABLE_DEFAULTS, "broker_url"}
    ours |= {_TO_OLD_KEY[k] for k in ours if k in _TO_OLD_KEY}
    compared = 0
    for key in spellings():
        if key in ours:
            continue
        try:
            expected: object = plain.conf[key]
        except KeyError as exc:
            with pytest.raises(KeyError) as raised:
                plus.conf[key]
            assert raised.value.args == exc.args
            continue
        assert plus.conf[key] == expected, key
        compared += 1
    assert compared > 150
    assert plus.conf.task_serializer == plain.conf.task_serializer
    assert plus.conf.result_expires == 77


def test_a_changed_key_transform_is_read_through() -> None:
    """The spellings kept per key follow the object's ``key_t`` when it is replaced."""
    app = Celery("t", set_as_current=False)
    app.conf.update(task_default_queue="q")
    conf = app.conf
    assert conf["task_default_queue"] == "q"
    conf.__dict__["key_t"] = str.lower
    assert conf["TASK_DEFAULT_QUEUE"] == "q"
    conf.__dict__["key_t"] = None
    with pytest.raises(KeyError):
        conf["TASK_DEFAULT_QUEUE"]
    assert "_plus_spellings" not in conf.changes
