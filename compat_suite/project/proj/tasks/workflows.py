"""Canvas building blocks: chain steps, callbacks, errbacks, and a task replacing itself."""

from typing import Any

from proj.celery import app
from proj.effects import record
from proj.tasks.arithmetic import add, tsum


@app.task
def step(done: list[str], name: str) -> list[str]:
    """Appends ``name`` to the list it is given (a chain threads the list through)."""
    record("step", name=name)
    return [*done, name]


@app.task
def on_done(result: Any, tag: str) -> None:
    """A ``link`` callback: receives the parent's result."""
    record("linked", tag=tag, result=result)


@app.task
def on_error(request: Any, exc: BaseException, traceback: str) -> None:
    """A ``link_error`` errback (Celery's (request, exc, traceback) signature)."""
    record("errback", task=request.task, exception=type(exc).__name__, message=str(exc),
           has_traceback=bool(traceback))


@app.task(bind=True)
def total(self, x: int, y: int) -> int:
    """Replaces itself with ``add(x, y)``: the caller gets the replacement's result."""
    record("replaced", id=self.request.id)
    raise self.replace(add.s(x, y))


@app.task
def squares(numbers: list[int]) -> list[int]:
    return [n * n for n in numbers]


@app.task(bind=True)
def sum_of_squares(self, numbers: list[int]) -> Any:
    """Replaces itself with the chain ``squares | tsum`` (Task.replace with a canvas)."""
    raise self.replace(squares.s(numbers) | tsum.s())
