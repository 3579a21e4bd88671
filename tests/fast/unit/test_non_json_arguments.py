"""Defect 12 of issue 12: arguments a key cannot be built from fail naming the task, the
option and the argument (and nothing is published)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from celery_plus import Celery


class Opaque:
    pass


@pytest.fixture
def app() -> Iterator[Celery]:
    # Publishing is never reached: the key is built first. Eager is off; a broker that
    # cannot be reached proves it (a publish would fail differently).
    app = Celery("nonjson", broker="plus+redis://127.0.0.1:1/0", set_as_current=False)
    yield app
    app.close()


@pytest.mark.parametrize(("options", "call", "option_text", "argument"), [
    ({"unique": True}, ((Opaque(), 1), {}), "unique=True", "'payload'"),
    ({"unique_by": ["payload"]}, ((), {"payload": {"x": Opaque()}, "n": 1}),
     "unique_by=['payload']", "'payload'"),
    ({"concurrency": 1, "concurrency_key": "payload"}, ((b"\x00bytes", 2), {}),
     "concurrency_key='payload'", "'payload'"),
])
def test_the_error_names_task_option_and_argument(
        app: Celery, options: dict[str, Any], call: tuple[tuple[Any, ...], dict[str, Any]],
        option_text: str, argument: str) -> None:
    @app.task(name="nonjson.job", **options)
    def job(payload: Any, n: int = 0) -> None: ...

    with pytest.raises(TypeError) as err:
        job.apply_async(*call)
    message = str(err.value)
    assert "'nonjson.job'" in message and option_text in message and argument in message
