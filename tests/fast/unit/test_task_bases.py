"""Defect 4 of issue 12 (unit level): celery-plus's ``Task`` is mixed into any base."""

from __future__ import annotations

import celery
import pytest
from celery.exceptions import ImproperlyConfigured
from celery.worker.request import Request as CeleryRequest

from celery_plus import Celery, shared_task
from celery_plus.task import Request as PlusRequest
from celery_plus.task import Task as PlusTask
from celery_plus.task import plus_task_class


class MyRequest(CeleryRequest):
    pass


class MyBase(celery.Task):
    Request = MyRequest
    marker = "mine"


def _app() -> Celery:
    return Celery("bases", broker="plus+redis://127.0.0.1:6379/0", set_as_current=False)


def test_a_celery_base_gets_the_extensions_and_keeps_its_own_overrides() -> None:
    app = _app()

    @app.task(name="bases.u", base=MyBase, unique_by=["key"])
    def u(key: str, other: int = 0) -> None: ...

    assert isinstance(u, MyBase) and isinstance(u, PlusTask)
    assert u.plus_extensions is not None and u.plus_extensions.unique_by == ("key",)
    assert u.marker == "mine"
    request = u.Request if isinstance(u.Request, type) else None
    assert request is not None and issubclass(request, MyRequest)
    assert issubclass(request, PlusRequest)


def test_the_apps_task_cls_and_shared_task_bases_get_the_extensions() -> None:
    app = Celery("bases2", broker="plus+redis://127.0.0.1:6379/0", task_cls=MyBase,
                 set_as_current=False)
    assert issubclass(app.Task, MyBase) and issubclass(app.Task, PlusTask)

    @shared_task(name="bases.shared", base=MyBase, unique=True)
    def shared(x: int) -> None: ...

    task = app.tasks["bases.shared"]
    assert isinstance(task, PlusTask) and task.plus_extensions is not None


def test_mixing_is_cached_and_plus_bases_are_kept() -> None:
    assert plus_task_class(MyBase) is plus_task_class(MyBase)
    assert plus_task_class(celery.Task) is PlusTask
    assert plus_task_class(PlusTask) is PlusTask


def test_a_base_that_is_no_task_fails_loudly() -> None:
    with pytest.raises(ImproperlyConfigured, match=r"not a celery\.Task subclass"):
        plus_task_class(object)
