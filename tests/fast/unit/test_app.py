"""celery_plus.Celery and Task: the import swap, durable defaults, decoration-time validation."""

from __future__ import annotations

import importlib

import celery
import pytest
from celery.exceptions import ImproperlyConfigured

import celery_plus
from celery_plus import Celery, Task


def make_app() -> Celery:
    return Celery("t", broker="plus+redis://127.0.0.1:6379/0", set_as_current=False)


CELERY_TOP_LEVEL = (
    "Celery", "bugreport", "shared_task", "Task", "current_app", "current_task",
    "maybe_signature", "chain", "chord", "chunks", "group", "signature", "xmap", "xstarmap",
    "uuid", "Signature", "subtask",
)


@pytest.mark.parametrize("name", CELERY_TOP_LEVEL)
def test_every_celery_export_is_importable_from_celery_plus(name: str) -> None:
    assert hasattr(celery_plus, name)


@pytest.mark.parametrize(
    "module", ["result", "exceptions", "schedules", "signals", "states", "utils", "utils.log"]
)
def test_submodules_re_export_celery(module: str) -> None:
    ours = importlib.import_module(f"celery_plus.{module}")
    theirs = importlib.import_module(f"celery.{module}")
    for name in getattr(theirs, "__all__", ()):
        assert getattr(ours, name) is getattr(theirs, name), name


def test_app_is_a_celery_subclass_with_durable_defaults() -> None:
    app = make_app()
    assert isinstance(app, celery.Celery)
    assert app.conf.task_acks_late is True
    assert app.conf.task_reject_on_worker_lost is True
    assert app.conf.plus_max_deliveries == 5


def test_the_worker_timer_checks_often_and_user_config_still_wins() -> None:
    # Jobs with an ETA reach the worker already due; Celery's threaded timer (used with the
    # synchronous plus transport) would otherwise hold them up to 1 s (its default precision).
    assert make_app().conf.worker_timer_precision == 0.1
    app = make_app()
    app.config_from_object({"worker_timer_precision": 0.5})
    assert app.conf.worker_timer_precision == 0.5


def test_tasks_use_the_celery_plus_base_and_keep_their_options() -> None:
    app = make_app()

    @app.task(unique_by=["customer_id"], concurrency=2, concurrency_key="customer_id")
    def report(customer_id: int, month: str = "jan") -> None: ...

    assert isinstance(report, Task)
    ext = report.plus_extensions
    assert ext is not None
    assert ext.unique_by == ("customer_id",)
    assert ext.unique_window == "running"
    assert ext.concurrency == 2


def test_plain_tasks_have_no_extensions() -> None:
    app = make_app()

    @app.task
    def plain(x: int) -> int:
        return x

    assert plain.plus_extensions is None
    assert plain(3) == 3


@pytest.mark.parametrize(
    ("options", "option_named"),
    [
        ({"unique_by": ["nope"]}, "unique_by"),
        ({"unique": True, "unique_window": "forever"}, "unique_window"),
        ({"unique_ttl": -1}, "unique_ttl"),
        ({"concurrency": 0}, "concurrency"),
        ({"concurrency": 1, "concurrency_key": "missing"}, "concurrency_key"),
        ({"max_deliveries": 0}, "max_deliveries"),
    ],
)
def test_bad_options_fail_when_the_decorator_is_applied(options: dict, option_named: str) -> None:
    app = make_app()
    with pytest.raises(ImproperlyConfigured, match=option_named):
        app.task(**options)(lambda customer_id: None)


def test_shared_task_validates_at_decoration_time() -> None:
    with pytest.raises(ImproperlyConfigured, match="unique_by"):
        celery_plus.shared_task(unique_by=["nope"])(lambda x: None)


def test_explicit_acks_late_false_is_overridden_with_a_warning() -> None:
    app = make_app()
    with pytest.warns(UserWarning, match="acks_late"):
        @app.task(concurrency=1, acks_late=False)
        def limited() -> None: ...

        assert limited.acks_late is True
