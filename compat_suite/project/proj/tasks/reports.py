"""Report tasks, declared with ``@shared_task`` and routed to the reports queue."""

from typing import Any

from celery import current_app, shared_task

from proj.effects import record


@shared_task(bind=True)
def tick(self, source: str) -> str:
    """Run every second by beat."""
    record("tick", source=source, queue=self.request.delivery_info.get("routing_key"))
    return source


@shared_task(bind=True)
def build(self, name: str) -> str:
    record("build", name=name, queue=self.request.delivery_info.get("routing_key"))
    return f"report {name}"


@shared_task
def whoami() -> dict[str, Any]:
    """The classes of the worker's app and of its tasks (which Celery is running this)."""
    app = current_app._get_current_object()
    task_classes = type(app.tasks["proj.tasks.reports.build"]).__mro__
    return {"app": f"{type(app).__module__}.{type(app).__qualname__}",
            "task_bases": sorted({c.__module__.partition(".")[0] for c in task_classes})}
