"""Signal handlers of proj: every task signal is recorded as an effect (kind ``signal``)."""

from typing import Any

from celery.signals import (
    after_task_publish,
    before_task_publish,
    task_failure,
    task_postrun,
    task_prerun,
    task_received,
    task_retry,
    task_revoked,
    task_success,
)

from proj.effects import record


def _task_id(request: Any) -> str | None:
    return getattr(request, "id", None) if request is not None else None


@before_task_publish.connect
def on_before_publish(sender: str | None = None, headers: Any = None,
                      routing_key: str | None = None, **_: Any) -> None:
    record("signal", signal="before_task_publish", task=sender, id=(headers or {}).get("id"),
           routing_key=routing_key)


@after_task_publish.connect
def on_after_publish(sender: str | None = None, headers: Any = None,
                     routing_key: str | None = None, **_: Any) -> None:
    record("signal", signal="after_task_publish", task=sender, id=(headers or {}).get("id"),
           routing_key=routing_key)


@task_received.connect
def on_received(request: Any = None, **_: Any) -> None:
    record("signal", signal="task_received", task=request.name, id=request.id)


@task_prerun.connect
def on_prerun(task_id: str | None = None, task: Any = None, **_: Any) -> None:
    record("signal", signal="task_prerun", task=task.name, id=task_id)


@task_postrun.connect
def on_postrun(task_id: str | None = None, task: Any = None, state: str | None = None,
               **_: Any) -> None:
    record("signal", signal="task_postrun", task=task.name, id=task_id, state=state)


@task_success.connect
def on_success(sender: Any = None, **_: Any) -> None:
    record("signal", signal="task_success", task=sender.name, id=sender.request.id)


@task_failure.connect
def on_failure(sender: Any = None, task_id: str | None = None, exception: Any = None,
               **_: Any) -> None:
    record("signal", signal="task_failure", task=sender.name, id=task_id,
           exception=type(exception).__name__)


@task_retry.connect
def on_retry(sender: Any = None, request: Any = None, **_: Any) -> None:
    record("signal", signal="task_retry", task=sender.name, id=_task_id(request))


@task_revoked.connect
def on_revoked(sender: Any = None, request: Any = None, terminated: bool = False,
               expired: bool = False, **_: Any) -> None:
    record("signal", signal="task_revoked", task=getattr(sender, "name", None),
           id=_task_id(request), terminated=bool(terminated), expired=bool(expired))
