"""The web side: a form that enqueues, and a JSON view of a result."""

from celery.result import AsyncResult
from flask import Blueprint, abort, request

from . import tasks

bp = Blueprint("tasks", __name__)

FORM = """<!doctype html>
<form method="post" action="/add">
  <input type="number" name="a"> + <input type="number" name="b">
  <button type="submit">Add</button>
</form>
<form method="post" action="/greet">
  <input type="text" name="name"> <button type="submit">Greet</button>
</form>
"""


@bp.get("/")
def index() -> str:
    return FORM


def _numbers(*names: str) -> list[int]:
    try:
        return [int(request.form[name]) for name in names]
    except (KeyError, ValueError):
        abort(400)


@bp.post("/add")
def start_add() -> dict[str, object]:
    a, b = _numbers("a", "b")
    return {"result_id": tasks.add.delay(a, b).id}


@bp.post("/divide")
def start_divide() -> dict[str, object]:
    a, b = _numbers("a", "b")
    return {"result_id": tasks.divide.delay(a, b).id}


@bp.post("/greet")
def start_greet() -> dict[str, object]:
    name = request.form.get("name", "").strip()
    if not name:
        abort(400)
    return {"result_id": tasks.greet.delay(name).id}


@bp.get("/result/<id>")
def task_result(id: str) -> dict[str, object]:
    result = AsyncResult(id)
    ready = result.ready()
    return {
        "ready": ready,
        "successful": result.successful() if ready else None,
        "value": result.get() if ready and result.successful() else (
            repr(result.result) if ready else None),
        "state": result.state,
    }
