"""Celery users' habits (issue 30) that silently turned the extensions off.

* A task with ``concurrency`` or a ``running`` unique window acks late whatever ``acks_late``
  it would have had (``task_acks_late = False``, a base class's, an annotation's): one
  warning per task names it and what to change.
* Extension options on a task of a plain ``celery.Celery`` app raise (a half-swapped project).
* ``task_annotations`` apply extension options, validated as the decorator's; a misspelt one
  names the annotation and the option meant.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
import warnings
from collections.abc import Iterator
from typing import Any

import celery
import pytest
from celery import _state
from celery.contrib.testing import tasks  # noqa: F401  (celery.ping, for start_worker)
from celery.contrib.testing.worker import start_worker
from celery.exceptions import ImproperlyConfigured

import celery_plus
from celery_plus import Celery
from celery_plus.stores.memory.state import forget_named


def _app(**conf: Any) -> Celery:
    app = Celery("habits", broker="plus+memory://habits", set_as_current=False)
    app.conf.update(**conf)
    return app


def _overrides(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if "is overridden to True" in str(w.message)]


# -- 0: acks_late forced on, whatever the source ------------------------------------------
class EarlyBase(celery_plus.Task):
    acks_late = False


@pytest.mark.parametrize(("conf", "task_options", "origin"), [
    ({"task_acks_late": False}, {}, "task_acks_late setting"),
    ({}, {"base": EarlyBase}, "base class tests.fast.unit.test_task_habits.EarlyBase"),
    ({"task_annotations": {"habits.limited": {"acks_late": False}}}, {},
     "task_annotations['habits.limited']"),
    ({"task_annotations": {"*": {"acks_late": False}}}, {}, "task_annotations['*']"),
    ({}, {"acks_late": False}, "the task's own acks_late argument"),
])
def test_the_effective_acks_late_false_is_overridden_with_one_warning_naming_its_source(
        conf: dict[str, Any], task_options: dict[str, Any], origin: str) -> None:
    app = _app(**conf)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")

        @app.task(name="habits.limited", concurrency=1, shared=False, **task_options)
        def limited() -> None: ...

        @app.task(name="habits.once", unique=True, shared=False, **task_options)
        def once(x: int) -> None: ...

        @app.task(name="habits.plain", shared=False, **task_options)
        def plain() -> None: ...

        assert limited.acks_late is True
        assert once.acks_late is True
        limited.app, once.app, app.tasks  # noqa: B018  (bound again: no second warning)
    if "habits.limited" not in origin:
        assert plain.acks_late is False  # a task without extensions keeps Celery's meaning
    messages = _overrides(caught)
    # One warning for each task whose early ack is overridden (an annotation of
    # habits.limited alone leaves habits.once at Celery's default: nothing to override).
    warned = ["'habits.limited'"] + ([] if "habits.limited" in origin else ["'habits.once'"])
    for name in warned:
        assert len([m for m in messages if name in m]) == 1, (name, messages)
    assert origin in next(m for m in messages if "'habits.limited'" in m)


def test_a_ttl_window_task_keeps_an_early_ack_without_a_warning() -> None:
    app = _app(task_acks_late=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")

        @app.task(name="habits.ttl", unique=True, unique_ttl=60, shared=False)
        def ttl() -> None: ...

        assert ttl.acks_late is False
    assert _overrides(caught) == []


@pytest.fixture
def memory_app() -> Iterator[Celery]:
    name = f"h{uuid.uuid4().hex[:10]}"
    app = Celery("habits", broker=f"plus+memory://{name}", backend="cache+memory://",
                 set_as_current=False)
    app.conf.update(worker_hijack_root_logger=False, plus_poll_interval=0.1,
                    task_acks_late=False)
    root_level = logging.root.level
    yield app
    app.close()
    forget_named(name)
    logging.root.setLevel(root_level)  # start_worker's logging setup sets it to ERROR


def test_concurrency_one_runs_one_at_a_time_under_task_acks_late_false(
        memory_app: Celery) -> None:
    lock = threading.Lock()
    running: list[int] = []
    peak: list[int] = [0]

    @memory_app.task(name="habits.slot", concurrency=1, shared=False)
    def slot(i: int) -> int:
        with lock:
            running.append(i)
            peak[0] = max(peak[0], len(running))
        time.sleep(0.3)
        with lock:
            running.remove(i)
        return i

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with start_worker(memory_app, pool="threads", concurrency=3,
                          perform_ping_check=False):
            results = [slot.delay(i) for i in range(3)]
            assert sorted(r.get(timeout=20) for r in results) == [0, 1, 2]
    assert peak[0] == 1


# -- 3: extension options on a plain Celery app --------------------------------------------
@pytest.fixture
def finalizers() -> Iterator[None]:
    """Only this test's plus shared tasks reach its apps, and none is left registered for
    later apps of the session."""
    saved = set(_state._on_app_finalizers)
    _state._on_app_finalizers.difference_update(
        {f for f in saved if getattr(f, "plus_shared_task", False)})
    yield
    _state._on_app_finalizers.clear()
    _state._on_app_finalizers.update(saved)


def _refuses(task: Any, name: str, option: str) -> None:
    """Sending ``task`` raises, naming the task, the option and the fix."""
    for use in (lambda: task.delay(1), lambda: task.apply_async((1,))):
        with pytest.raises(ImproperlyConfigured) as err:
            use()
        text = str(err.value)
        assert f"'{name}'" in text and option in text and "celery_plus.Celery" in text


def test_a_plus_shared_task_with_extension_options_on_a_plain_celery_app_raises_when_used(
        finalizers: None) -> None:
    plain = celery.Celery("halfswapped", broker="memory://", set_as_current=False)

    @celery_plus.shared_task(name="habits.report", unique_by=["customer_id"])
    def report(customer_id: int) -> None: ...

    plain.finalize()  # an unrelated plain app of the process keeps working ...
    _refuses(plain.tasks["habits.report"], "habits.report", "unique_by")  # ... this task not
    plus = _app()
    assert plus.tasks["habits.report"].plus_extensions is not None  # a plus app is fine
    assert plus.tasks["habits.report"].plus_refused is None


def test_a_plus_shared_task_on_an_already_finalized_plain_app_raises_when_used(
        finalizers: None) -> None:
    plain = celery.Celery("halfswapped2", broker="memory://", set_as_current=False)
    plain.finalize()

    @celery_plus.shared_task(name="habits.later", concurrency=2)
    def later(x: int) -> None: ...

    _refuses(plain.tasks["habits.later"], "habits.later", "concurrency")


def test_a_plus_task_base_with_extension_options_on_a_plain_app_raises_when_used() -> None:
    plain = celery.Celery("halfswapped3", broker="memory://", set_as_current=False)

    def job(x: int) -> None: ...

    task = plain.task(name="habits.based", base=celery_plus.Task, max_deliveries=3,
                      shared=False, lazy=False)(job)
    _refuses(task, "habits.based", "max_deliveries")


def test_a_plus_shared_task_without_extension_options_still_works_on_a_plain_app(
        finalizers: None) -> None:
    plain = celery.Celery("halfswapped4", broker="memory://", set_as_current=False)

    @celery_plus.shared_task(name="habits.simple")
    def simple() -> int:
        return 1

    assert plain.tasks["habits.simple"]() == 1


# -- 4: task_annotations ---------------------------------------------------------------
def test_task_annotations_apply_extension_options() -> None:
    app = _app(task_annotations=[{"habits.report": {"unique_by": ["customer_id"],
                                                     "concurrency": 2}},
                                 {"*": {"max_deliveries": 3}}])

    @app.task(name="habits.report", shared=False)
    def report(customer_id: int, month: str = "jan") -> None: ...

    @app.task(name="habits.other", shared=False)
    def other() -> None: ...

    ext = report.plus_extensions
    assert ext is not None and ext.unique_by == ("customer_id",) and ext.concurrency == 2
    assert ext.max_deliveries == 3
    assert other.plus_extensions is not None and other.plus_extensions.max_deliveries == 3
    assert report.acks_late is True


@pytest.mark.parametrize(("annotations", "says"), [
    ({"habits.t": {"unique_bye": ["x"]}}, r"task_annotations\['habits\.t'\].*'unique_by'"),
    ({"*": {"concurency": 1}}, r"task_annotations\['\*'\].*'concurrency'"),
    ({"habits.t": {"unique_by": ["nope"]}},
     r"unique_by.*no parameter named 'nope'.*task_annotations\['habits\.t'\]"),
    ({"habits.t": {"concurrency": 0}}, r"concurrency=0.*task_annotations\['habits\.t'\]"),
])
def test_a_bad_or_misspelt_extension_option_in_task_annotations_fails_naming_it(
        annotations: dict[str, Any], says: str) -> None:
    app = _app(task_annotations=annotations)

    @app.task(name="habits.t", shared=False)
    def t(x: int) -> None: ...

    with pytest.raises(ImproperlyConfigured, match=says):
        t.plus_extensions  # noqa: B018  (the task is created, and bound, here)
